package lvmvm

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

var fullLVsRunners = flag.String("fulllvs.runners", "shell,exec",
	"comma-separated lvmd --lvm-runner values BenchmarkNodeFullOfLVs runs with, each on a fresh VG")

// lvmShell runs lines as one `lvm` shell in the guest (the commands read
// from its standard input): the benchmark fills a VG with it, one process
// for a hundred lvcreates.
func lvmShell(ctx context.Context, lines []string) (*ExecResult, error) {
	var res ExecResult
	in := []byte(strings.Join(lines, "\n") + "\n")
	if err := testVM.post(ctx, "/exec", map[string]any{"argv": []string{"lvm"}, "stdin": in}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// denseLVs is how many LVs vgdense holds (its pool aside).
func denseLVs(b *testing.B, ctx context.Context) int {
	b.Helper()
	out, err := testVM.Run(ctx, "lvm", "vgs", "--noheadings", "-o", "lv_count", "vgdense")
	if err != nil {
		b.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		b.Fatal(err)
	}
	return n - 1
}

// fullLVsRow is one level of the curve.
type fullLVsRow struct {
	lvs                    int
	create, report, fillLV time.Duration
	mdaFree                uint64
}

// BenchmarkNodeFullOfLVs measures, on one VG with pvcreate's default
// metadata area (vgdense), lvmd's CreateLV time and the time of the report
// lvmd refreshes (lvm fullreport with lvmd's arguments) at 10, 100, 500
// and 1,000 LVs, then fills the VG until lvcreate fails for want of
// metadata room and reports that count. The LVs are thin LVs named and
// tagged as the node agent makes them (pvc-<uuid>, thinlvm, lv:<name>);
// the fill between levels runs in one lvm shell per hundred LVs, bare and
// without lvm's metadata archive.
// Run it with -benchtime 1x.
func BenchmarkNodeFullOfLVs(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Minute)
	defer cancel()
	const class, vg = "dense", "vgdense"
	const samples = 5
	levels := []int{10, 100, 500, 1000}
	for range b.N {
		for _, runner := range strings.Split(*fullLVsRunners, ",") {
			// lvmd as deployed: the default idle refresh (30s).
			if err := testVM.StopLVMD(ctx, syscall.SIGTERM); err != nil {
				b.Fatal(err)
			}
			args := []string{"--lvm-runner", runner}
			if err := testVM.StartLVMD(ctx, lvmdConfig, args...); err != nil {
				b.Fatal(err)
			}
			if n := denseLVs(b, ctx); n != 0 {
				b.Fatalf("vgdense holds %d LVs before the run", n)
			}
			start := time.Now()
			var rows []fullLVsRow
			next := 0 // the fill's next LV number
			fill := func(to int) (failed string) {
				for have := denseLVs(b, ctx); have < to; have = denseLVs(b, ctx) {
					var lines []string
					for range min(100, to-have) {
						name := pvcName("f111", next)
						next++
						// No metadata archive or backup file per command: a
						// thousand full copies would fill the guest's memory
						// (its /etc is a tmpfs) and only slow the fill.
						lines = append(lines, fmt.Sprintf("lvcreate --yes --config backup/archive=0 --autobackup n --thin %s/pool --virtualsize 4m --name %s --addtag thinlvm --addtag lv:%s",
							vg, name, name))
					}
					res, err := lvmShell(ctx, lines)
					if err != nil {
						b.Fatal(err)
					}
					if i := strings.Index(string(res.Stderr), "exceeds maximum metadata size"); i >= 0 {
						line := string(res.Stderr)[strings.LastIndex(string(res.Stderr[:i]), "\n")+1:]
						line, _, _ = strings.Cut(line, "\n")
						return strings.TrimSpace(line)
					}
					if res.ExitCode != 0 {
						b.Fatalf("lvm shell: exit %d: %s", res.ExitCode, res.Stderr)
					}
				}
				return ""
			}
			for _, level := range levels {
				fillStart, before := time.Now(), denseLVs(b, ctx)
				if msg := fill(level - samples); msg != "" {
					b.Fatalf("lvcreate failed below %d LVs: %s", level, msg)
				}
				row := fullLVsRow{lvs: level}
				if n := denseLVs(b, ctx) - before; n > 0 {
					row.fillLV = time.Since(fillStart) / time.Duration(n)
				}
				var creates, reports []time.Duration
				for i := range samples {
					time.Sleep(time.Second) // lvmd idle: its coalesced refresh done
					name := pvcName(fmt.Sprintf("c%03d", level%1000), i)
					t0 := time.Now()
					if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: name, DeviceClass: class, SizeBytes: 4 * mib, Tags: []string{"lv:" + name}}); err != nil {
						b.Fatalf("CreateLV at %d LVs: %v", level, err)
					}
					creates = append(creates, time.Since(t0))
				}
				time.Sleep(time.Second)
				for range 3 {
					t0 := time.Now()
					if _, err := testVM.Run(ctx, append([]string{"lvm"}, lvm.FullReportArgs([]string{vg})...)...); err != nil {
						b.Fatal(err)
					}
					reports = append(reports, time.Since(t0))
				}
				row.create, row.report = median(creates), median(reports)
				c, err := vgs.GetCapacity(ctx, &pb.GetCapacityRequest{DeviceClass: class})
				if err != nil {
					b.Fatal(err)
				}
				row.mdaFree = c.GetDeviceClasses()[0].GetVgMetadataFreeBytes()
				rows = append(rows, row)
				fmt.Fprintf(os.Stderr, "fulllvs %s: %d LVs: CreateLV %s, fullreport %s, fill %s/LV, vg_mda_free %d (%s so far)\n",
					runner, level, row.create, row.report, row.fillLV.Round(time.Millisecond), row.mdaFree, time.Since(start).Round(time.Second))
			}
			// On to the limit.
			failure := fill(1 << 20)
			limit := denseLVs(b, ctx)
			if failure == "" {
				b.Fatal("the fill ended without lvm's metadata error")
			}
			c, err := vgs.GetCapacity(ctx, &pb.GetCapacityRequest{DeviceClass: class})
			if err != nil {
				b.Fatal(err)
			}
			mdaSize := c.GetDeviceClasses()[0].GetVgMetadataSizeBytes()
			first := rows[0]
			perLV := float64(first.mdaFree) / float64(limit-first.lvs)

			w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "\nrunner %s; vg_mda_size %d; lvcreate failed at LV %d: %s\n", runner, mdaSize, limit+1, failure)
			fmt.Fprintf(w, "| LVs in the VG | CreateLV (median of %d) | fullreport (median of 3) | bare lvcreate in the fill (mean) | vg_mda_free |\n|---|---|---|---|---|\n", samples)
			for _, r := range rows {
				fmt.Fprintf(w, "| %d | %s (%.2fx) | %s (%.2fx) | %s | %d |\n", r.lvs, r.create, float64(r.create)/float64(first.create),
					r.report, float64(r.report)/float64(first.report), r.fillLV.Round(time.Millisecond), r.mdaFree)
			}
			fmt.Fprintf(w, "\nabout %.0f bytes of VG metadata per LV; the run took %s\n", perLV, time.Since(start).Round(time.Second))
			w.Flush()
			last := rows[len(rows)-1]
			b.ReportMetric(float64(limit), "lvs-at-limit")
			b.ReportMetric(perLV, "mda-bytes/lv")
			b.ReportMetric(float64(last.create)/float64(first.create), "create1000/create10")
			b.ReportMetric(float64(last.report)/float64(first.report), "report1000/report10")

			// A fresh VG for the next runner (removing 1,300 LVs one by one
			// would take longer than making them).
			for _, argv := range [][]string{
				{"lvm", "vgremove", "--yes", "--force", vg},
				{"lvm", "pvremove", "--yes", "/dev/vdk"},
			} {
				if _, err := testVM.Run(ctx, argv...); err != nil {
					b.Fatal(err)
				}
			}
			if err := testVM.SetupThinPool(ctx, "/dev/vdk", vg, "pool", "2G", "64M"); err != nil {
				b.Fatal(err)
			}
		}
	}
}
