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
	"comma-separated lvmd --lvm-runner values BenchmarkNodeFullOfLVs samples at each level")

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

// reportSeconds is the sum and count of lvmd's fullreport durations
// (thinlvm_lvmd_lvm_command_duration_seconds{command="fullreport"}).
func reportSeconds(b *testing.B, ctx context.Context) (sum float64, count uint64) {
	b.Helper()
	fams, err := testVM.LVMDMetrics(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range fams["thinlvm_lvmd_lvm_command_duration_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "command" && l.GetValue() == "fullreport" {
				sum += m.GetHistogram().GetSampleSum()
				count += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return sum, count
}

// fullLVsSample is one runner's figures at one level.
type fullLVsSample struct {
	create, refresh time.Duration
}

// fullLVsRow is one level of the curve.
type fullLVsRow struct {
	lvs             int
	runners         map[string]fullLVsSample
	bareReport      time.Duration
	fillLV          time.Duration
	metadataFreeNow uint64
}

// BenchmarkNodeFullOfLVs measures, on one VG with pvcreate's default
// metadata area (vgdense), at 10, 100, 500 and 1,000 LVs: lvmd's CreateLV
// time and its report refresh time (lvm fullreport, as lvmd's own
// lvm_command_duration_seconds has it) with each lvm runner (lvmd is
// restarted with --lvm-runner at every level), and a bare lvm fullreport
// process with lvmd's arguments. Then it fills the VG until lvcreate fails
// for want of metadata room and reports that count. The LVs are thin LVs
// named and tagged as the node agent makes them (pvc-<uuid>, thinlvm,
// lv:<name>); the fill between levels runs in one lvm shell per hundred
// LVs, bare and without lvm's metadata archive. Run it with -benchtime 1x.
func BenchmarkNodeFullOfLVs(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	const class, vg = "dense", "vgdense"
	const samples = 5
	levels := []int{10, 100, 500, 1000}
	runners := strings.Split(*fullLVsRunners, ",")
	for range b.N {
		if n := denseLVs(b, ctx); n != 0 {
			b.Fatalf("vgdense holds %d LVs before the run", n)
		}
		start := time.Now()
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
		var rows []fullLVsRow
		for li, level := range levels {
			fillStart, before := time.Now(), denseLVs(b, ctx)
			if msg := fill(level - samples*len(runners)); msg != "" {
				b.Fatalf("lvcreate failed below %d LVs: %s", level, msg)
			}
			row := fullLVsRow{lvs: level, runners: map[string]fullLVsSample{}}
			if n := denseLVs(b, ctx) - before; n > 0 {
				row.fillLV = time.Since(fillStart) / time.Duration(n)
			}
			for ri, runner := range runners {
				// lvmd as deployed (30s idle refresh), with this runner.
				if err := testVM.StopLVMD(ctx, syscall.SIGTERM); err != nil {
					b.Fatal(err)
				}
				if err := testVM.StartLVMD(ctx, lvmdConfig, "--lvm-runner", runner); err != nil {
					b.Fatal(err)
				}
				time.Sleep(time.Second)
				sum0, n0 := reportSeconds(b, ctx)
				var creates []time.Duration
				for i := range samples {
					name := pvcName(fmt.Sprintf("c%d%02d", li, ri), i)
					t0 := time.Now()
					if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: name, DeviceClass: class, SizeBytes: 4 * mib, Tags: []string{"lv:" + name}}); err != nil {
						b.Fatalf("CreateLV at %d LVs with the %s runner: %v", level, runner, err)
					}
					creates = append(creates, time.Since(t0))
					// lvmd idle again: its coalesced refresh (200ms after
					// the create) done, measured by lvmd.
					time.Sleep(time.Second + 3*creates[i])
				}
				sum1, n1 := reportSeconds(b, ctx)
				s := fullLVsSample{create: median(creates)}
				if n1 > n0 {
					s.refresh = time.Duration((sum1 - sum0) / float64(n1-n0) * float64(time.Second)).Round(time.Millisecond)
				}
				row.runners[runner] = s
			}
			var reports []time.Duration
			for range 3 {
				t0 := time.Now()
				if _, err := testVM.Run(ctx, append([]string{"lvm"}, lvm.FullReportArgs([]string{vg})...)...); err != nil {
					b.Fatal(err)
				}
				reports = append(reports, time.Since(t0))
			}
			row.bareReport = median(reports)
			c, err := vgs.GetCapacity(ctx, &pb.GetCapacityRequest{DeviceClass: class})
			if err != nil {
				b.Fatal(err)
			}
			row.metadataFreeNow = c.GetDeviceClasses()[0].GetVgMetadataFreeBytes()
			rows = append(rows, row)
			fmt.Fprintf(os.Stderr, "fulllvs: %d LVs: %v, bare fullreport %s, fill %s/LV, vg_mda_free %d (%s so far)\n",
				level, row.runners, row.bareReport, row.fillLV.Round(time.Millisecond), row.metadataFreeNow, time.Since(start).Round(time.Second))
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
		first, last := rows[0], rows[len(rows)-1]
		perLV := float64(first.metadataFreeNow) / float64(limit-first.lvs)

		w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(w, "\nvg_mda_size %d; %d LVs fit, lvcreate of the next failed: %s\n", mdaSize, limit, failure)
		fmt.Fprintf(w, "| LVs in the VG |")
		for _, r := range runners {
			fmt.Fprintf(w, " CreateLV, %s runner (median of %d) | refresh, %s runner (lvmd's mean) |", r, samples, r)
		}
		fmt.Fprintf(w, " bare fullreport process (median of 3) | bare lvcreate in the fill (mean) | vg_mda_free |\n|---|")
		for range runners {
			fmt.Fprintf(w, "---|---|")
		}
		fmt.Fprintf(w, "---|---|---|\n")
		for _, r := range rows {
			fmt.Fprintf(w, "| %d |", r.lvs)
			for _, rn := range runners {
				s, s0 := r.runners[rn], first.runners[rn]
				fmt.Fprintf(w, " %s (%.2fx) | %s (%.2fx) |", s.create, float64(s.create)/float64(s0.create), s.refresh, float64(s.refresh)/float64(s0.refresh))
			}
			fmt.Fprintf(w, " %s (%.2fx) | %s | %d |\n", r.bareReport, float64(r.bareReport)/float64(first.bareReport), r.fillLV.Round(time.Millisecond), r.metadataFreeNow)
		}
		if len(runners) == 2 {
			a, e := runners[0], runners[1]
			fmt.Fprintf(w, "\nCreateLV %s/%s runner:", a, e)
			for _, r := range rows {
				fmt.Fprintf(w, " %.2f at %d;", float64(r.runners[a].create)/float64(r.runners[e].create), r.lvs)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "about %.0f bytes of VG metadata per LV; the run took %s\n", perLV, time.Since(start).Round(time.Second))
		w.Flush()
		b.ReportMetric(float64(limit), "lvs-at-limit")
		b.ReportMetric(perLV, "mda-bytes/lv")
		for _, rn := range runners {
			b.ReportMetric(float64(last.runners[rn].create)/float64(first.runners[rn].create), "create1000/create10-"+rn)
		}
		b.ReportMetric(float64(last.bareReport)/float64(first.bareReport), "report1000/report10")

		// An empty VG for another -count (removing 1,300 LVs one by one
		// would take longer than making them).
		if err := testVM.StopLVMD(ctx, syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
		for _, argv := range [][]string{{"lvm", "vgremove", "--yes", "--force", vg}, {"lvm", "pvremove", "--yes", "/dev/vdk"}} {
			if _, err := testVM.Run(ctx, argv...); err != nil {
				b.Fatal(err)
			}
		}
		if err := testVM.SetupThinPool(ctx, "/dev/vdk", vg, "pool", "2G", "64M"); err != nil {
			b.Fatal(err)
		}
		if err := startLVMD(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
