package plugin

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// The nodes' index holds the LVMNodes the informer's handler was told of,
// and the holders it counts are what a walk over them with BaseState
// counts, through adds, updates and deletes (a
// tombstone among them): the first entry of a base is the one that
// counts, and a base of a deleted image of the same name (another UID)
// is not the current image's.
func TestNodeIndexFollowsLVMNodes(t *testing.T) {
	f := newFake()
	ubuntu := f.addImage("ubuntu", "u2", "", "4Gi")
	oldUbuntu := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", UID: "u1"}}
	debian := f.addImage("debian", "d1", "", "4Gi")
	images := []*thinlvmv1.GoldenImage{ubuntu, oldUbuntu, debian}
	states := []thinlvmv1.GoldenBaseState{thinlvmv1.GoldenBaseReady, thinlvmv1.GoldenBasePopulating, thinlvmv1.GoldenBaseFailed}
	h := newNodeIndex()
	handler := h.handler()
	rng := rand.New(rand.NewPCG(1, 2))
	node := func(name string) *thinlvmv1.LVMNode {
		var bases []thinlvmv1.GoldenBaseStatus
		for range rng.IntN(4) {
			bases = append(bases, goldenBase(images[rng.IntN(len(images))], states[rng.IntN(len(states))]))
		}
		f.addNode(name, "10Gi", "10Gi", bases...)
		return f.nodes[name]
	}
	check := func(step string) {
		t.Helper()
		for _, gi := range images {
			gotHolders, gotNodes := h.holders(gi)
			wantHolders, wantNodes := f.BaseHolders(gi)
			if gotHolders != wantHolders || gotNodes != wantNodes {
				t.Fatalf("%s: %s (uid %s): counted %d holders of %d nodes, want %d of %d", step, gi.Name, gi.UID, gotHolders, gotNodes, wantHolders, wantNodes)
			}
		}
		for i := range 60 {
			name := fmt.Sprintf("n%d", i)
			var got *thinlvmv1.LVMNode
			if n := h.node(name); n != nil {
				got = n.LVMNode
			}
			if want := f.nodes[name]; got != want {
				t.Fatalf("%s: node %s is %p in the index, want %p", step, name, got, want)
			}
		}
	}
	for i := range 50 {
		handler.OnAdd(node(fmt.Sprintf("n%d", i)), true)
	}
	check("added")
	for i := range 200 {
		name := fmt.Sprintf("n%d", rng.IntN(60))
		old, ok := f.nodes[name]
		switch {
		case !ok:
			handler.OnAdd(node(name), false)
		case rng.IntN(4) == 0:
			delete(f.nodes, name)
			if rng.IntN(2) == 0 {
				handler.OnDelete(old)
			} else {
				handler.OnDelete(cache.DeletedFinalStateUnknown{Key: name, Obj: old})
			}
		default:
			handler.OnUpdate(old, node(name))
		}
		check(fmt.Sprintf("change %d", i))
	}
}

// A node that reports a base twice holds it as its first entry says.
func TestNodeIndexTakesTheFirstEntry(t *testing.T) {
	f := newFake()
	gi := f.addImage("ubuntu", "u2", "", "4Gi")
	h := newNodeIndex()
	f.addNode("failed-first", "1Gi", "1Gi", goldenBase(gi, thinlvmv1.GoldenBaseFailed), goldenBase(gi, thinlvmv1.GoldenBaseReady))
	f.addNode("ready-first", "1Gi", "1Gi", goldenBase(gi, thinlvmv1.GoldenBaseReady), goldenBase(gi, thinlvmv1.GoldenBaseReady))
	for _, n := range f.nodes {
		h.set(n)
	}
	if holders, nodes := h.holders(gi); holders != 1 || nodes != 2 {
		t.Errorf("counted %d holders of %d nodes, want 1 of 2", holders, nodes)
	}
}

// A sweep takes only the reservations that are due, in any order of
// arrival, and what it leaves is swept when its time comes: the queue
// agrees with a walk over every reservation.
func TestLedgerSweepsWhatIsDue(t *testing.T) {
	const ttl = 10 * time.Second
	l := newLedger(ttl)
	l.recheck = 3 * time.Second
	now := time.Unix(1_000_000, 0)
	l.now = func() time.Time { return now }
	rng := rand.New(rand.NewPCG(3, 4))
	// settle tells which reservations have settled (by pod), as of now.
	settle := map[types.UID]bool{}
	var asked []types.UID
	settled := func(r reservation) bool { asked = append(asked, r.pod); return settle[r.pod] }
	type want struct {
		at, recheck time.Time
	}
	model := map[types.UID]*want{}
	for step := range 400 {
		now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		switch op := rng.IntN(10); {
		case op < 4:
			uid := types.UID(fmt.Sprintf("p%d", rng.IntN(40)))
			l.reserve(uid, reservation{node: "n1", bytes: map[string]int64{"ssd": 1}})
			model[uid] = &want{at: now, recheck: now}
		case op < 5:
			uid := types.UID(fmt.Sprintf("p%d", rng.IntN(40)))
			l.release(uid)
			delete(model, uid)
		default:
			for uid := range model {
				settle[uid] = rng.IntN(5) == 0
			}
			asked = nil
			l.sweep(settled)
			// The walk the queue replaces.
			wantAsked := map[types.UID]bool{}
			for uid, m := range model {
				switch {
				case now.Sub(m.at) > ttl:
					delete(model, uid)
				case now.Before(m.recheck):
				case settle[uid]:
					wantAsked[uid] = true
					delete(model, uid)
				default:
					wantAsked[uid] = true
					m.recheck = now.Add(l.recheck)
				}
			}
			if len(asked) != len(wantAsked) {
				t.Fatalf("step %d: asked about %v, want %v", step, asked, wantAsked)
			}
			for _, uid := range asked {
				if !wantAsked[uid] {
					t.Fatalf("step %d: asked about %s, which is not due", step, uid)
				}
			}
		}
		if l.len() != len(model) || l.reserved("n1", "ssd").bytes != int64(len(model)) || l.queue.Len() != len(model) {
			t.Fatalf("step %d: %d reservations (%d queued, %d bytes), want %d", step, l.len(), l.queue.Len(), l.reserved("n1", "ssd").bytes, len(model))
		}
	}
}
