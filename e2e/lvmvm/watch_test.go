package lvmvm

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// TestReadsStartNoLVMProcess: with three watchers open and 100 capacity
// queries, 20 creates cost 20 lvcreate processes and at most one report
// each: reads and watchers share lvmd's cached report.
func TestReadsStartNoLVMProcess(t *testing.T) {
	ctx := testContext(t)
	before, err := testVM.LVMCommands(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 100 {
		if _, err := vgs.GetCapacity(ctx, &pb.GetCapacityRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	mid, err := testVM.LVMCommands(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The only report allowed here is the idle refresh (every 2s in tests).
	if n, allowed := mid["fullreport"]-before["fullreport"], time.Since(start).Seconds()/2+1; n > allowed {
		t.Errorf("100 GetCapacity calls: %v lvm reports, want <= %v (idle refreshes only)", n, allowed)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type seen struct {
		mu   sync.Mutex
		msgs int
		last *pb.GetCapacityResponse
	}
	watchers := make([]*seen, 3)
	var wg sync.WaitGroup
	for i := range watchers {
		w := &seen{}
		watchers[i] = w
		stream, err := vgs.Watch(wctx, &pb.WatchRequest{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				msg, err := stream.Recv()
				if err != nil {
					return
				}
				w.mu.Lock()
				w.msgs++
				w.last = msg
				w.mu.Unlock()
			}
		}()
	}
	start = time.Now()
	for i := range 20 {
		if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: fmt.Sprintf("w%02d", i), SizeBytes: 8 * mib}); err != nil {
			t.Fatal(err)
		}
		if _, err := vgs.GetCapacity(ctx, &pb.GetCapacityRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	want := capacityOf(t, "ssd").GetLvCount()
	eventually(t, 20*time.Second, func() string {
		for i, w := range watchers {
			w.mu.Lock()
			msgs, last := w.msgs, w.last
			w.mu.Unlock()
			if msgs < 2 || last == nil || last.GetDeviceClasses()[0].GetLvCount() != want {
				return fmt.Sprintf("watcher %d saw %d reports, last %v; want lv count %d", i, msgs, last, want)
			}
		}
		return ""
	})
	elapsed := time.Since(start).Seconds()
	after, err := testVM.LVMCommands(ctx)
	if err != nil {
		t.Fatal(err)
	}
	creates, reports := after["lvcreate"]-mid["lvcreate"], after["fullreport"]-mid["fullreport"]
	t.Logf("20 creates with 3 watchers and 20 queries: %v lvcreate, %v fullreport processes in %.1fs", creates, reports, elapsed)
	if creates != 20 {
		t.Errorf("%v lvcreate processes for 20 creates", creates)
	}
	if reports > 20+elapsed/2+1 {
		t.Errorf("%v reports for 20 creates: more than one per mutation", reports)
	}
	cancel()
	wg.Wait()
	for i := range 20 {
		if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: fmt.Sprintf("w%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMetrics(t *testing.T) {
	ctx := testContext(t)
	_, _ = lvs.GetLV(ctx, &pb.GetLVRequest{Name: "no-such-lv"})
	fams, err := testVM.LVMDMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"thinlvm_lvmd_vg_size_bytes", "thinlvm_lvmd_vg_free_bytes", "thinlvm_lvmd_thinpool_size_bytes",
		"thinlvm_lvmd_thinpool_data_percent", "thinlvm_lvmd_thinpool_metadata_percent", "thinlvm_lvmd_thinpool_virtual_bytes",
		"thinlvm_lvmd_available_bytes", "thinlvm_lvmd_lvs", "thinlvm_lvmd_rpc_duration_seconds", "thinlvm_lvmd_rpc_errors_total",
		"thinlvm_lvmd_lvm_commands_total"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	c := capacityOf(t, "ssd")
	for _, m := range fams["thinlvm_lvmd_thinpool_size_bytes"].GetMetric() {
		if m.GetLabel()[0].GetValue() == "ssd" && uint64(m.GetGauge().GetValue()) != c.GetThinPoolSizeBytes() {
			t.Errorf("pool size gauge %v, GetCapacity says %d", m.GetGauge().GetValue(), c.GetThinPoolSizeBytes())
		}
	}
	found := false
	for _, m := range fams["thinlvm_lvmd_rpc_errors_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["method"] == "/thinlvm.lvmd.v1.LVService/GetLV" && labels["code"] == "NotFound" && m.GetCounter().GetValue() >= 1 {
			found = true
		}
	}
	if !found {
		t.Error("rpc_errors_total has no GetLV NotFound")
	}
}

// TestRestartLosesNothing kills lvmd in the middle of a burst of creates
// and snapshots; after a restart, retrying every request (as the node agent
// does) ends with exactly the LVs asked for, of the sizes asked for.
func TestRestartLosesNothing(t *testing.T) {
	ctx := testContext(t)
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "rs-origin", SizeBytes: 32 * mib}); err != nil {
		t.Fatal(err)
	}
	const n = 12
	requests := func(i int) error {
		var err error
		if i%2 == 0 {
			_, err = lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: fmt.Sprintf("rs%02d", i), SizeBytes: 16 * mib, Tags: []string{"lv:rs"}})
		} else {
			_, err = lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: fmt.Sprintf("rs%02d", i), SourceName: "rs-origin", SizeBytes: 64 * mib, Tags: []string{"lv:rs"}})
		}
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = requests(i) }()
	}
	time.Sleep(3 * time.Second) // some done, some running, some queued
	if err := testVM.StopLVMD(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			if c := status.Code(err); c != codes.Unavailable && c != codes.Canceled && c != codes.Unknown {
				t.Errorf("request failed with %v during the kill: %v", c, err)
			}
		}
	}
	t.Logf("%d of %d requests were cut off by the kill", failed, n)
	if err := startLVMD(ctx, "--refresh-interval", "2s"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := requests(i); err != nil {
			t.Errorf("retry %d after restart: %v", i, err)
		}
	}
	got := lvsOf(t, ctx, "vg0")
	for i := range n {
		name, want := fmt.Sprintf("rs%02d", i), 16*mib
		if i%2 == 1 {
			want = 64 * mib
		}
		lv, ok := got[name]
		if !ok || lv.size != want || lv.tags != "lv:rs,thinlvm" {
			t.Errorf("%s after restart: %+v (present %t), want %d bytes tagged lv:rs,thinlvm", name, lv, ok, want)
		}
	}
	list, err := lvs.ListLVs(ctx, &pb.ListLVsRequest{Tag: "lv:rs"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetVolumes()) != n {
		t.Errorf("ListLVs(tag lv:rs) = %d volumes, want %d", len(list.GetVolumes()), n)
	}
	for _, v := range list.GetVolumes() {
		if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: v.GetName()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "rs-origin"}); err != nil {
		t.Fatal(err)
	}
	// A graceful stop and start too.
	if err := testVM.StopLVMD(ctx, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := startLVMD(ctx, "--refresh-interval", "2s"); err != nil {
		t.Fatal(err)
	}
	if _, err := lvs.GetLV(ctx, &pb.GetLVRequest{Name: "rs00"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetLV of a removed LV after restart: %v", err)
	}
}
