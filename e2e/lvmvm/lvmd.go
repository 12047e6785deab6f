package lvmvm

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// lvmdProcess is the agent's name for the lvmd process.
const lvmdProcess = "lvmd"

// SetupThinPool makes disk a PV, creates vg on it and a thin pool of
// poolSize (lvm size syntax, e.g. "4G") with metadataSize (e.g. "64M").
func (vm *VM) SetupThinPool(ctx context.Context, disk, vg, pool, poolSize, metadataSize string) error {
	for _, argv := range [][]string{
		{"lvm", "pvcreate", "--yes", disk},
		{"lvm", "vgcreate", vg, disk},
		{"lvm", "lvcreate", "--yes", "--type", "thin-pool", "--size", poolSize, "--poolmetadatasize", metadataSize, "--name", pool, vg},
	} {
		if _, err := vm.Run(ctx, argv...); err != nil {
			return err
		}
	}
	return nil
}

// StartLVMD writes configYAML to the share and starts lvmd on the forwarded
// port, waiting until its health service answers SERVING.
func (vm *VM) StartLVMD(ctx context.Context, configYAML string, extraArgs ...string) error {
	if err := os.WriteFile(filepath.Join(vm.ShareDir(), "lvmd.yaml"), []byte(configYAML), 0o644); err != nil {
		return err
	}
	argv := append([]string{"/share/bin/thinlvm-lvmd", "--config", "/share/lvmd.yaml",
		"--listen", fmt.Sprintf("tcp://0.0.0.0:%d", LVMDPort),
		"--metrics-address", fmt.Sprintf("0.0.0.0:%d", LVMDMetricsPort), "-v", "2"}, extraArgs...)
	if err := vm.Spawn(ctx, lvmdProcess, "/share/lvmd.log", argv...); err != nil {
		return err
	}
	return vm.WaitServing(ctx, LVMDPort, vm.LVMDLog)
}

// StopLVMD sends sig to lvmd and waits for it to exit.
func (vm *VM) StopLVMD(ctx context.Context, sig syscall.Signal) error {
	return vm.Signal(ctx, lvmdProcess, sig, true)
}

// LVMDLog returns lvmd's log.
func (vm *VM) LVMDLog() string {
	b, _ := os.ReadFile(filepath.Join(vm.ShareDir(), "lvmd.log"))
	return string(b)
}

// DialLVMD connects to lvmd through the forward. Calls made before lvmd
// listens fail; StartLVMD waits for it.
func (vm *VM) DialLVMD() (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+vm.Addr(LVMDPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// LVMDMetrics scrapes lvmd's Prometheus metrics.
func (vm *VM) LVMDMetrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	return scrape(ctx, vm.Addr(LVMDMetricsPort), "lvmd")
}

// scrape reads the Prometheus metrics served at addr (a forward to a
// guest port) in the text format.
func scrape(ctx context.Context, addr, what string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s metrics: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s metrics: %s", what, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// LVMCommands sums thinlvm_lvmd_lvm_commands_total by subcommand: how many
// lvm processes lvmd started.
func (vm *VM) LVMCommands(ctx context.Context) (map[string]float64, error) {
	fams, err := vm.LVMDMetrics(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	if f, ok := fams["thinlvm_lvmd_lvm_commands_total"]; ok {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "command" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out, nil
}

// LVS runs `lvs` in the guest for vg and returns name -> fields for the
// given comma-separated fields (sizes in bytes).
func (vm *VM) LVS(ctx context.Context, vg, fields string) (map[string][]string, error) {
	out, err := vm.Run(ctx, "lvm", "lvs", "--noheadings", "--units", "b", "--nosuffix", "--separator", "|", "-o", "lv_name,"+fields, vg)
	if err != nil {
		return nil, err
	}
	res := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		parts := strings.Split(strings.TrimSpace(line), "|")
		if len(parts) == 0 || parts[0] == "" {
			continue
		}
		res[parts[0]] = parts[1:]
	}
	return res, nil
}

// nodeProcess is the agent's name for the CSI node service process.
const nodeProcess = "thinlvm-node"

// StartCSINode starts thinlvm-node in the VM serving only CSI (no API
// server) on the forwarded CSI port, talking to the running lvmd.
func (vm *VM) StartCSINode(ctx context.Context, nodeName string) error {
	argv := []string{"/share/bin/thinlvm-node", "--controllers=false", "--node-name", nodeName,
		"--lvmd-address", fmt.Sprintf("tcp://127.0.0.1:%d", LVMDPort),
		"--csi-address", fmt.Sprintf("tcp://0.0.0.0:%d", CSIPort), "-v", "2"}
	if err := vm.Spawn(ctx, nodeProcess, "/share/thinlvm-node.log", argv...); err != nil {
		return err
	}
	conn, err := vm.DialCSI()
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := csi.NewIdentityClient(conn).Probe(pctx, &csi.ProbeRequest{})
		cancel()
		if err == nil && resp.GetReady().GetValue() {
			return nil
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(vm.ShareDir(), "thinlvm-node.log"))
			return fmt.Errorf("csi node not ready after 1m (%w); log:\n%s", err, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// DialCSI connects to the CSI node service through the forward.
func (vm *VM) DialCSI() (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+vm.Addr(CSIPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
}
