package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// vm is a VM node's VM.
func (tb *Testbed) vm(node string) (*lvmvm.VM, error) {
	vm := tb.VMs[node]
	if vm == nil {
		return nil, fmt.Errorf("node %s is not a VM node", node)
	}
	return vm, nil
}

// LVChecksum is the XXH64 (hex, as lvmvm.VM.Checksum) of the whole of an
// LV of a VM node's vg0, read in its VM. An inactive LV (a sealed golden
// base) is activated for the read and deactivated after it.
func (tb *Testbed) LVChecksum(ctx context.Context, node, lv string) (sum string, err error) {
	vm, err := tb.vm(node)
	if err != nil {
		return "", err
	}
	lvs, err := vm.LVS(ctx, "vg0", "lv_active")
	if err != nil {
		return "", err
	}
	st, ok := lvs[lv]
	if !ok {
		return "", fmt.Errorf("no LV vg0/%s on %s", lv, node)
	}
	if len(st) == 0 || st[0] != "active" {
		if _, err := vm.Run(ctx, "lvm", "lvchange", "--activate", "y", "--ignoreactivationskip", "vg0/"+lv); err != nil {
			return "", fmt.Errorf("activate vg0/%s on %s: %w", lv, node, err)
		}
		defer func() {
			if _, derr := vm.Run(ctx, "lvm", "lvchange", "--activate", "n", "vg0/"+lv); derr != nil {
				err = errors.Join(err, fmt.Errorf("deactivate vg0/%s on %s: %w", lv, node, derr))
			}
		}()
	}
	sum, n, err := vm.Checksum(ctx, "/dev/vg0/"+lv)
	if err != nil {
		return "", fmt.Errorf("checksum of vg0/%s on %s: %w", lv, node, err)
	}
	if n == 0 {
		return "", fmt.Errorf("checksum of vg0/%s on %s read nothing", lv, node)
	}
	return sum, nil
}

// WriteRandom writes n MiB of random bytes from offset off MiB into an LV
// of a VM node's vg0, with direct I/O, synced.
func (tb *Testbed) WriteRandom(ctx context.Context, node, lv string, off, n int64) error {
	vm, err := tb.vm(node)
	if err != nil {
		return err
	}
	_, err = vm.Run(ctx, "dd", "if=/dev/urandom", "of=/dev/vg0/"+lv, "bs=1M", fmt.Sprintf("seek=%d", off), fmt.Sprintf("count=%d", n),
		"oflag=direct", "conv=fsync,notrunc", "status=none")
	return err
}
