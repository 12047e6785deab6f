package lvmvm

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// killLVM is a guest script that SIGKILLs the lvm processes it finds (the
// shell, or a command of the exec runner, which lives for a fraction of a
// second: the script looks again, without starting a process per look,
// for up to 5 s until it finds one) and prints how many it killed.
const killLVM = `n=0
for try in {1..500}; do
  for p in /proc/[0-9]*; do
    c=; read -r c < "$p/comm" 2>/dev/null
    if [ "$c" = lvm ] && kill -9 "${p##*/}" 2>/dev/null; then n=$((n+1)); fi
  done
  [ $n -gt 0 ] && break
  sleep 0.01
done
echo $n`

// TestLVMKilledMidBurst kills lvm itself (not lvmd) again and again while a
// burst of creates runs: with the shell runner the shell dies under a
// command, with the exec runner the command's process does. A request whose
// lvm was killed ends Unavailable (its outcome unknown), never with a wrong
// answer; retrying every request, as the node agent does, ends with exactly
// the LVs asked for, and lvmd's view agrees with lvm's.
func TestLVMKilledMidBurst(t *testing.T) {
	ctx := testContext(t)
	const n = 20
	create := func(i int) error {
		_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: fmt.Sprintf("kb%02d", i), SizeBytes: 16 * mib, Tags: []string{"lv:kb"}})
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = create(i) }()
	}
	killed := 0
	for range 3 {
		time.Sleep(500 * time.Millisecond)
		out, err := testVM.Run(ctx, "bash", "-c", killLVM)
		if err != nil {
			t.Fatal(err)
		}
		var k int
		fmt.Sscan(strings.TrimSpace(out), &k)
		killed += k
	}
	wg.Wait()
	if killed == 0 {
		t.Fatal("no lvm process was running to kill: the burst ended too soon to test anything")
	}
	unavailable := 0
	for i, err := range errs {
		switch status.Code(err) {
		case codes.OK:
		case codes.Unavailable:
			unavailable++
		default:
			t.Errorf("kb%02d: %v; want OK, or Unavailable when its lvm was killed", i, err)
		}
	}
	t.Logf("killed %d lvm processes; %d of %d creates ended Unavailable", killed, unavailable, n)
	for i := range n {
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			if err = create(i); status.Code(err) != codes.Unavailable {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			t.Errorf("retry of kb%02d: %v", i, err)
		}
	}
	got := lvsOf(t, ctx, "vg0")
	for i := range n {
		name := fmt.Sprintf("kb%02d", i)
		if lv, ok := got[name]; !ok || lv.size != 16*mib || lv.tags != "lv:kb,thinlvm" {
			t.Errorf("%s in lvm: %+v (present %t), want 16 MiB tagged lv:kb,thinlvm", name, lv, ok)
		}
	}
	list, err := lvs.ListLVs(ctx, &pb.ListLVsRequest{Tag: "lv:kb"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetVolumes()) != n {
		t.Errorf("lvmd lists %d LVs tagged lv:kb, want %d", len(list.GetVolumes()), n)
	}
	// No device left suspended by a kill in the middle of lvm's work.
	out, err := testVM.Run(ctx, "dmsetup", "info", "-c", "--noheadings", "-o", "name,suspended")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasSuffix(strings.TrimSpace(line), ":Suspended") {
			t.Errorf("device left suspended: %s", line)
		}
	}
	// Removed as the node agent removes a volume: a failed RemoveLV is
	// tried again (a device that lvm found busy once, after the kills,
	// has been free the next second).
	for _, v := range list.GetVolumes() {
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			if _, err = lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: v.GetName()}); err == nil {
				break
			}
			t.Logf("remove %s (attempt %d): %v", v.GetName(), attempt+1, err)
			time.Sleep(time.Second)
		}
		if err != nil {
			tree, _ := testVM.Run(ctx, "dmsetup", "ls", "--tree")
			t.Fatalf("%v\ndevice-mapper's devices:\n%s", err, tree)
		}
	}
}
