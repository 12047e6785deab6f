// Command demo shows lvmd on real lvm2: it boots the test VM, starts lvmd,
// writes a golden base, carves VM disks from it as thin snapshots, and
// compares them with a full copy. `make demo` runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"

	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

const (
	mib = uint64(1) << 20
	gib = uint64(1) << 30
)

const lvmdConfig = `deviceClasses:
- name: nvme
  volumeGroup: vg0
  thinPool: pool
  overprovisionRatio: 20
  default: true
`

type step struct {
	start time.Time
	t0    time.Time
}

func (s *step) do(what string, f func() (string, error)) {
	fmt.Printf("  %-58s ", what)
	t := time.Now()
	detail, err := f()
	if err != nil {
		fmt.Printf("FAILED\n\n%v\n", err)
		panic(errDemo)
	}
	fmt.Printf("%7.2fs  %s\n", time.Since(t).Seconds(), detail)
}

var errDemo = fmt.Errorf("demo failed")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := 0
	func() {
		defer func() {
			if r := recover(); r != nil {
				if r != errDemo {
					panic(r)
				}
				code = 1
			}
		}()
		run(ctx)
	}()
	os.Exit(code)
}

func run(ctx context.Context) {
	s := &step{start: time.Now()}
	fmt.Println("thinlvm demo: lvmd on real lvm2 (Debian kernel under qemu, a 16 GiB sparse disk)")
	fmt.Println()
	var vm *lvmvm.VM
	s.do("boot the VM and build lvmd", func() (string, error) {
		var err error
		vm, err = lvmvm.Start(ctx, lvmvm.Options{Disks: []string{"16G"}})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("guest ready %.1fs after qemu started", vm.BootSeconds), nil
	})
	defer func() {
		fmt.Printf("  %-58s ", "stop the VM")
		t := time.Now()
		vm.Stop()
		fmt.Printf("%7.2fs\n", time.Since(t).Seconds())
	}()
	go func() { <-ctx.Done(); vm.Stop() }() // Ctrl-C: power off, remove the disks
	s.do("create VG vg0 and an 8 GiB thin pool", func() (string, error) {
		return "", vm.SetupThinPool(ctx, "/dev/vda", "vg0", "pool", "8G", "64M")
	})
	s.do("start lvmd (gRPC on a forwarded port)", func() (string, error) {
		// A short idle refresh, so that the report below sees the data the
		// demo wrote (a write is no lvm mutation; lvmd's default is 30s).
		return vm.Addr(lvmvm.LVMDPort), vm.StartLVMD(ctx, lvmdConfig, "--refresh-interval", "2s")
	})
	conn, err := vm.DialLVMD()
	if err != nil {
		fmt.Println(err)
		panic(errDemo)
	}
	defer conn.Close()
	lvs, vgs := pb.NewLVServiceClient(conn), pb.NewVGServiceClient(conn)

	const baseSize, diskSize, written = 2 * gib, 10 * gib, 512
	s.do("CreateLV golden-base (2 GiB)", func() (string, error) {
		_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "golden-base", SizeBytes: baseSize, Tags: []string{"base:demo"}})
		return "", err
	})
	s.do(fmt.Sprintf("write %d MiB of image data into the base", written), func() (string, error) {
		_, err := vm.Run(ctx, "dd", "if=/dev/urandom", "of=/dev/vg0/golden-base", "bs=4M", fmt.Sprintf("count=%d", written/4), "oflag=direct", "status=none")
		return "", err
	})
	var snapTimes []time.Duration
	for i := range 10 {
		name := fmt.Sprintf("vm-disk-%02d", i)
		s.do(fmt.Sprintf("CreateSnapshot %s (10 GiB, from the base)", name), func() (string, error) {
			t := time.Now()
			v, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: name, SourceName: "golden-base", SizeBytes: diskSize})
			snapTimes = append(snapTimes, time.Since(t))
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s, %d GiB", v.GetVolume().GetDevicePath(), v.GetVolume().GetSizeBytes()/gib), nil
		})
	}
	var sums []string
	s.do("checksum the base and two disks (first 64 MiB)", func() (string, error) {
		for _, lv := range []string{"golden-base", "vm-disk-00", "vm-disk-09"} {
			out, err := vm.Run(ctx, "bash", "-c", "dd if=/dev/vg0/"+lv+" bs=1M count=64 status=none | sha256sum")
			if err != nil {
				return "", err
			}
			sums = append(sums, strings.Fields(out)[0][:12])
		}
		return strings.Join(sums, " "), nil
	})
	if sums[0] != sums[1] || sums[0] != sums[2] {
		fmt.Println("  the disks do not read the base's data")
		panic(errDemo)
	}
	var copyTime time.Duration
	s.do("for comparison: CreateLV + full dd copy of the base", func() (string, error) {
		t := time.Now()
		if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "full-copy", SizeBytes: baseSize}); err != nil {
			return "", err
		}
		_, err := vm.Run(ctx, "dd", "if=/dev/vg0/golden-base", "of=/dev/vg0/full-copy", "bs=4M", "oflag=direct", "status=none")
		copyTime = time.Since(t)
		return "", err
	})
	time.Sleep(3 * time.Second) // let lvmd's next report land
	c, err := vgs.GetCapacity(ctx, &pb.GetCapacityRequest{})
	if err != nil {
		fmt.Println(err)
		panic(errDemo)
	}
	dc := c.GetDeviceClasses()[0]

	fmt.Println()
	fmt.Println("What happened")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "  VM disks made from the base\t10 x 10 GiB thin snapshots\n")
	fmt.Fprintf(w, "  time per disk (median)\t%s\n", median(snapTimes))
	fmt.Fprintf(w, "  time for one full copy of the 2 GiB base\t%s (%.0fx a snapshot)\n", copyTime.Round(time.Millisecond), float64(copyTime)/float64(median(snapTimes)))
	fmt.Fprintf(w, "  virtual size carved\t%.1f GiB in a %.1f GiB pool (overprovision ratio %g)\n",
		float64(dc.GetVirtualBytes())/float64(gib), float64(dc.GetThinPoolSizeBytes())/float64(gib), dc.GetOverprovisionRatio())
	fmt.Fprintf(w, "  pool data in use\t%.2f%% (%d MiB: the base's data once, plus the full copy)\n", dc.GetDataPercent(), dc.GetDataUsedBytes()/mib)
	fmt.Fprintf(w, "  pool metadata in use\t%.2f%%\n", dc.GetMetadataPercent())
	fmt.Fprintf(w, "  still available to new volumes\t%.1f GiB\n", float64(dc.GetAvailableBytes())/float64(gib))
	fmt.Fprintf(w, "  every disk reads the base's data\tyes (sha256 %s)\n", sums[0])
	fmt.Fprintf(w, "  total demo time\t%s\n", time.Since(s.start).Round(time.Second))
	w.Flush()
	fmt.Println()
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2].Round(time.Millisecond)
}
