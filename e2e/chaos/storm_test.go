package chaos_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// size is how large a storm is.
type size struct {
	// ops is how many operations the workers run at least, workers how
	// many at once; they go on until every component has been killed
	// rounds times.
	ops, workers, rounds int
	// keepers are volumes on the VM node written before the storm and
	// checked after it.
	keepers int
	// pause is the longest wait between one kill's recovery and the next
	// kill (the wait is drawn from [pause/4, pause]).
	pause time.Duration
	// opTimeout is how long an operation may take before it has failed
	// for good.
	opTimeout time.Duration
	// opPause is the mean wait of a worker between two operations, so that
	// the operations spread over the kills instead of racing ahead of them.
	opPause time.Duration
}

// The operation kinds and their weights in the mix.
var kinds = []struct {
	name   string
	weight int
}{
	{"create-fs", 16}, {"create-block", 12}, {"golden-disk", 10}, {"snapshot", 10}, {"restore", 8},
	{"clone", 8}, {"expand", 8}, {"delete", 16}, {"delete-snapshot", 6},
}

// plan is the storm's random schedule, all drawn from its seed: the same
// seed replays the same operations and kills.
type plan struct {
	seed  int64
	kills []kill
}

// op is the plan's operation i: its kind, and the random source that
// chooses what it acts on.
func (p *plan) op(i int) (string, *rand.Rand) {
	r := rand.New(rand.NewPCG(uint64(p.seed), uint64(i)))
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	n := r.IntN(total)
	for _, k := range kinds {
		if n -= k.weight; n < 0 {
			return k.name, r
		}
	}
	panic("unreachable")
}

type kill struct {
	pause  time.Duration
	target string // a component (see targets), or "control-plane"
	pick   uint64 // chooses the replica or node
}

// targets are what the chaos loop kills: each a pod container kind.
var targets = []string{"lvmd", "thinlvm-node", "thinlvm-controller", "csi-provisioner", "csi-resizer", "csi-snapshotter", "thinlvm-scheduler"}

func newPlan(seed int64, sz size) *plan {
	r := rand.New(rand.NewPCG(uint64(seed), 0x7468696e6c766d))
	p := &plan{seed: seed}
	// Rounds of kills, each component once per round in a random order,
	// and etcd + kube-apiserver once, early in the first round.
	round := slices.Clone(targets)
	for i := range 12 * len(round) {
		if i%len(round) == 0 {
			r.Shuffle(len(round), func(a, b int) { round[a], round[b] = round[b], round[a] })
		}
		p.kills = append(p.kills, kill{pause: sz.pause/4 + time.Duration(r.Int64N(int64(sz.pause*3/4))), target: round[i%len(round)], pick: r.Uint64()})
	}
	at := 2 + r.IntN(3)
	p.kills = slices.Insert(p.kills, at, kill{pause: sz.pause / 2, target: "control-plane"})
	return p
}

// vol is a claim of the storm with its pod.
type vol struct {
	name  string
	class string
	block bool
	// node is where it is bound ("" until then); sum is the SHA-256 of its
	// first dataBytes when known (volumes on the VM node).
	node, sum string
	size      resource.Quantity
	keeper    bool // never deleted by the storm
	busy      bool // an operation acts on it
	// grown: a Filesystem volume grown once waits for its kubelet's
	// NodeExpandVolume before the resizer takes the next request, and the
	// harness has no kubelet: the storm grows each once (Block volumes
	// any number of times).
	grown bool
	pv    string
}

type snap struct {
	name   string
	source *vol
	node   string
	sum    string
	busy   bool
}

// result is what one operation came to.
type result struct {
	kind    string
	ok      bool
	retried bool // it met a Warning event on the way and still succeeded
	err     string
	took    time.Duration
}

type recovery struct {
	target, instance string
	took             time.Duration
	leader           bool // the killed container held a lease
	err              string
}

// storm is one run: its state and what it recorded.
type storm struct {
	t    testing.TB
	sz   size
	plan *plan
	log  io.Writer

	mu      sync.Mutex
	vols    map[string]*vol
	snaps   map[string]*snap
	results []result
	kills   []recovery
	n       int // names made so far
}

// dataBytes is how much of a volume the storm writes and checks.
const dataBytes = 4 << 20

// volumeSize is the size of the storm's new volumes and growBy what an
// expansion adds: small, so that hundreds of volumes fit the VM node's
// thin pool (16 GiB, overprovisioned 4x) and no claim waits for room.
const (
	volumeSize = "256Mi"
	growBy     = "64Mi"
)

// goldenClass is the storm's StorageClass of VM disks from its golden image.
const goldenClass = "chaos-golden"

func (s *storm) logf(format string, args ...any) {
	fmt.Fprintf(s.log, "%s chaos: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (s *storm) name(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return fmt.Sprintf("%s-%d", prefix, s.n)
}

// run is the whole storm: keepers written, operations and kills at once,
// then everything back up, the invariants checked and printed, and
// everything the storm made deleted.
func (s *storm) run() {
	t := s.t
	s.logf("seed %d: %d operations by %d workers, kills every %v-%v (replay: -chaos.seed=%d)", s.plan.seed, s.sz.ops, s.sz.workers, s.sz.pause/4, s.sz.pause, s.plan.seed)
	started := time.Now()
	s.writeKeepers()
	done := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Add(1)
	go func() { defer chaos.Done(); s.chaos(done) }()
	work := make(chan int)
	var workers sync.WaitGroup
	for range s.sz.workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range work {
				s.operate(i)
				_, r := s.plan.op(i)
				time.Sleep(time.Duration(r.Int64N(int64(2*s.sz.opPause) + 1)))
			}
		}()
	}
	// The operations go on until the plan's count is reached and every
	// component has been killed rounds times.
	for i := 0; i < s.sz.ops || !s.roundsDone(); i++ {
		work <- i
	}
	close(work)
	workers.Wait()
	close(done)
	chaos.Wait()
	stormTook := time.Since(started)
	s.logf("storm over after %v; waiting for every component", stormTook.Round(time.Second))
	s.allUp()
	inv := s.invariants()
	s.report(stormTook, inv)
	if inv.total() != 0 {
		t.Errorf("invariants broken (seed %d): %+v", s.plan.seed, inv)
	}
	if failed := s.failed(); failed > 0 {
		t.Errorf("%d operations failed for good (seed %d): every operation must succeed, retried if need be", failed, s.plan.seed)
	}
	s.cleanup()
}

// writeKeepers makes the keeper volumes on the VM node and writes a
// pattern into each.
func (s *storm) writeKeepers() {
	for i := range s.sz.keepers {
		block := i%2 == 0
		class := cluster.FilesystemClass
		if block {
			class = cluster.BlockClass
		}
		v := &vol{name: fmt.Sprintf("keeper-%d", i), class: class, block: block, size: resource.MustParse("1Gi"), keeper: true}
		s.create(v, cluster.OnNode(cluster.VMNode), nil)
		if err := s.waitBound(v, 5*time.Minute); err != nil {
			s.t.Fatalf("keeper %s: %v", v.name, err)
		}
		pattern := make([]byte, dataBytes)
		r := rand.New(rand.NewPCG(uint64(s.plan.seed), uint64(i)))
		for j := range pattern {
			pattern[j] = byte(r.Uint32())
		}
		file := "pattern-" + v.name
		if err := os.WriteFile(filepath.Join(tb.VM.ShareDir(), file), pattern, 0o644); err != nil {
			s.t.Fatal(err)
		}
		lv, err := s.lvName(v)
		if err != nil {
			s.t.Fatal(err)
		}
		if _, err := tb.VM.Run(ctx, "dd", "if=/share/"+file, "of=/dev/vg0/"+lv, "bs=1M", "oflag=direct", "conv=fsync", "status=none"); err != nil {
			s.t.Fatalf("write %s: %v", v.name, err)
		}
		v.sum = sum(pattern)
		s.mu.Lock()
		s.vols[v.name] = v
		s.mu.Unlock()
	}
	s.logf("%d keeper volumes written on %s", s.sz.keepers, cluster.VMNode)
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// createObject creates obj, retrying while the API server cannot be
// reached (a retry that finds it made by the last attempt is fine: the
// storm's names are its own).
func createObject(obj client.Object) error {
	return cluster.IgnoreAlreadyExists(retryAPI(func() error { return tb.Client.Create(ctx, obj) }))
}

// create makes a claim (from src when set) and its pod.
func (s *storm) create(v *vol, affinity *corev1.Affinity, src *corev1.TypedLocalObjectReference) error {
	c := cluster.Claim(v.name, v.class, v.size.String(), v.block)
	c.Spec.DataSource = src
	if err := createObject(c); err != nil {
		return fmt.Errorf("create claim %s: %w", v.name, err)
	}
	if err := createObject(cluster.Pod(v.name, v.block, affinity, v.name)); err != nil {
		return fmt.Errorf("create pod %s: %w", v.name, err)
	}
	return nil
}

// provision creates v's claim and pod, waits for the claim to bind and
// adds v to the storm's volumes.
func (s *storm) provision(v *vol, affinity *corev1.Affinity, from *corev1.TypedLocalObjectReference) error {
	if err := s.create(v, affinity, from); err != nil {
		return err
	}
	if err := s.waitBound(v, s.sz.opTimeout); err != nil {
		return err
	}
	s.mu.Lock()
	s.vols[v.name] = v
	s.mu.Unlock()
	return nil
}

// expand asks for v's claim to grow to want and waits until its PV shows
// it (the controller's expansion is done).
func expand(v *vol, want resource.Quantity, timeout time.Duration) error {
	if err := retryAPI(func() error {
		c := &corev1.PersistentVolumeClaim{}
		if err := tb.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: v.name}, c); err != nil {
			return err
		}
		c.Spec.Resources.Requests[corev1.ResourceStorage] = want
		return tb.Client.Update(ctx, c)
	}); err != nil {
		return err
	}
	return tb.WaitFor(ctx, "PV of "+v.name+" at "+want.String(), timeout, func() (bool, error) {
		pv := &corev1.PersistentVolume{}
		err := tb.Client.Get(ctx, types.NamespacedName{Name: v.pv}, pv)
		return err == nil && pv.Spec.Capacity.Storage().Cmp(want) >= 0, nil
	})
}

// waitBound waits for v's claim to bind and notes its PV and node.
func (s *storm) waitBound(v *vol, timeout time.Duration) error {
	return tb.WaitFor(ctx, "claim "+v.name+" bound", timeout, func() (bool, error) {
		c := &corev1.PersistentVolumeClaim{}
		if err := tb.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: v.name}, c); err != nil || c.Status.Phase != corev1.ClaimBound {
			return false, nil //nolint:nilerr // the API server may be restarting
		}
		pv := &corev1.PersistentVolume{}
		if err := tb.Client.Get(ctx, types.NamespacedName{Name: c.Spec.VolumeName}, pv); err != nil {
			return false, nil //nolint:nilerr
		}
		// The volume's size is what was made, which can be more than the
		// claim asked for (an xfs volume is at least 300 MiB): a restore
		// of its snapshot or a clone must ask for at least that much.
		s.mu.Lock()
		v.pv, v.node, v.size = pv.Name, pvNode(pv), pv.Spec.Capacity.Storage().DeepCopy()
		s.mu.Unlock()
		return true, nil
	})
}

func pvNode(pv *corev1.PersistentVolume) string {
	if na := pv.Spec.NodeAffinity; na != nil && na.Required != nil {
		for _, term := range na.Required.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Key == thinlvmv1.TopologyKey && len(e.Values) == 1 {
					return e.Values[0]
				}
			}
		}
	}
	return ""
}

// lvName is the LV of a bound volume.
func (s *storm) lvName(v *vol) (string, error) {
	pv := &corev1.PersistentVolume{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Name: v.pv}, pv); err != nil {
		return "", err
	}
	lv := &thinlvmv1.LogicalVolume{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Name: pv.Spec.CSI.VolumeHandle}, lv); err != nil {
		return "", err
	}
	if lv.Status.VolumeID == "" {
		return "", fmt.Errorf("LogicalVolume %s has no LV yet", lv.Name)
	}
	return lv.Status.VolumeID, nil
}

// pick takes a random volume (or snapshot) that ok accepts and marks it
// with mark, under the storm's lock; nil when there is none.
func pick[T any](s *storm, r *rand.Rand, m map[string]*T, ok func(*T) bool, mark func(*T)) *T {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := slices.Sorted(maps.Keys(m))
	var cands []*T
	for _, n := range names {
		if ok(m[n]) {
			cands = append(cands, m[n])
		}
	}
	if len(cands) == 0 {
		return nil
	}
	c := cands[r.IntN(len(cands))]
	mark(c)
	return c
}

// roundsDone tells whether every target has been killed rounds times
// (and the control plane restarted once).
func (s *storm) roundsDone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.kills) >= s.sz.rounds*len(targets)+1
}

// operate runs the plan's operation i.
func (s *storm) operate(i int) {
	kind, r := s.plan.op(i)
	start := time.Now()
	var watched []client.Object // objects whose Warning events mean a retry
	err := func() error {
		switch kind {
		case "create-fs", "create-block", "golden-disk":
			v := &vol{name: s.name(kind), class: cluster.FilesystemClass, size: resource.MustParse(volumeSize)}
			var affinity *corev1.Affinity
			switch kind {
			case "create-block":
				v.class, v.block = cluster.BlockClass, true
			case "golden-disk":
				v.class, v.block, v.sum = goldenClass, true, goldenSum
				affinity = cluster.OnNode(cluster.VMNode)
			}
			watched = append(watched, cluster.Claim(v.name, "", "1Gi", false), cluster.Pod(v.name, false, nil))
			return s.provision(v, affinity, nil)
		case "snapshot":
			src := s.busy(r, func(v *vol) bool { return v.pv != "" })
			if src == nil {
				return errSkip
			}
			defer s.idle(src)
			sn := &snap{name: s.name("snap"), source: src, node: src.node, sum: src.sum}
			obj := cluster.VolumeSnapshot(sn.name, src.name)
			watched = append(watched, obj)
			if err := createObject(obj); err != nil {
				return err
			}
			if err := waitSnapshot(sn.name, s.sz.opTimeout); err != nil {
				return err
			}
			s.mu.Lock()
			s.snaps[sn.name] = sn
			s.mu.Unlock()
		case "restore", "clone":
			var from *corev1.TypedLocalObjectReference
			v := &vol{name: s.name(kind)}
			if kind == "restore" {
				sn := pick(s, r, s.snaps, func(sn *snap) bool { return !sn.busy }, func(sn *snap) { sn.busy = true })
				if sn == nil {
					return errSkip
				}
				defer func() { s.mu.Lock(); sn.busy = false; s.mu.Unlock() }()
				from = &corev1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: sn.name}
				v.class, v.block, v.size, v.sum = sn.source.class, sn.source.block, sn.source.size, sn.sum
			} else {
				src := s.busy(r, func(v *vol) bool { return v.pv != "" })
				if src == nil {
					return errSkip
				}
				defer s.idle(src)
				from = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: src.name}
				v.class, v.block, v.size, v.sum = src.class, src.block, src.size, src.sum
			}
			watched = append(watched, cluster.Claim(v.name, "", "1Gi", false), cluster.Pod(v.name, false, nil))
			return s.provision(v, nil, from)
		case "expand":
			v := s.busy(r, func(v *vol) bool { return v.pv != "" && (v.block || !v.grown) })
			if v == nil {
				return errSkip
			}
			defer s.idle(v)
			watched = append(watched, cluster.Claim(v.name, "", "1Gi", false))
			want := v.size.DeepCopy()
			want.Add(resource.MustParse(growBy))
			if err := expand(v, want, s.sz.opTimeout); err != nil {
				return err
			}
			s.mu.Lock()
			v.size, v.grown = want, true
			s.mu.Unlock()
		case "delete":
			v := s.busy(r, func(v *vol) bool { return v.pv != "" && !v.keeper })
			if v == nil {
				return errSkip
			}
			watched = append(watched, cluster.Claim(v.name, "", "1Gi", false))
			if err := s.deleteVol(v, s.sz.opTimeout); err != nil {
				s.idle(v)
				return err
			}
			s.mu.Lock()
			delete(s.vols, v.name)
			s.mu.Unlock()
		case "delete-snapshot":
			sn := pick(s, r, s.snaps, func(sn *snap) bool { return !sn.busy }, func(sn *snap) { sn.busy = true })
			if sn == nil {
				return errSkip
			}
			obj := cluster.VolumeSnapshot(sn.name, "")
			watched = append(watched, obj)
			if err := deleteAndWait(obj, s.sz.opTimeout); err != nil {
				s.mu.Lock()
				sn.busy = false
				s.mu.Unlock()
				return err
			}
			s.mu.Lock()
			delete(s.snaps, sn.name)
			s.mu.Unlock()
		}
		return nil
	}()
	if err == errSkip {
		s.logf("op %d %s: nothing to act on yet", i, kind)
		return
	}
	res := result{kind: kind, ok: err == nil, took: time.Since(start)}
	if err != nil {
		res.err = err.Error()
		s.logf("op %d %s FAILED after %v: %v", i, kind, res.took.Round(time.Millisecond), err)
	} else {
		res.retried = warned(watched, start)
		s.logf("op %d %s ok in %v (retried %v)", i, kind, res.took.Round(time.Millisecond), res.retried)
	}
	s.mu.Lock()
	s.results = append(s.results, res)
	s.mu.Unlock()
}

var errSkip = fmt.Errorf("nothing to act on")

// busy picks an idle bound volume ok accepts and marks it busy.
func (s *storm) busy(r *rand.Rand, ok func(*vol) bool) *vol {
	return pick(s, r, s.vols, func(v *vol) bool { return !v.busy && ok(v) }, func(v *vol) { v.busy = true })
}

func (s *storm) idle(v *vol) {
	s.mu.Lock()
	v.busy = false
	s.mu.Unlock()
}

func waitSnapshot(name string, timeout time.Duration) error {
	return tb.WaitFor(ctx, "snapshot "+name+" ready", timeout, func() (bool, error) {
		u := cluster.VolumeSnapshot(name, "")
		if err := tb.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return false, nil //nolint:nilerr // the API server may be restarting
		}
		ready, _, _ := unstructured.NestedBool(u.Object, "status", "readyToUse")
		return ready, nil
	})
}

// deleteVol deletes a volume's pod and claim and waits until its PV is
// gone (the LV went with it).
func (s *storm) deleteVol(v *vol, timeout time.Duration) error {
	if err := deleteAndWait(cluster.Pod(v.name, false, nil), timeout); err != nil {
		return err
	}
	if err := deleteAndWait(cluster.Claim(v.name, "", "1Gi", false), timeout); err != nil {
		return err
	}
	if v.pv == "" {
		return nil
	}
	return waitGone(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: v.pv}}, timeout, false)
}

// deleteAndWait deletes obj and waits until it is gone.
func deleteAndWait(obj client.Object, timeout time.Duration) error {
	return waitGone(obj, timeout, true)
}

// waitGone waits until obj is gone, deleting it first when del is set.
func waitGone(obj client.Object, timeout time.Duration, del bool) error {
	return tb.WaitFor(ctx, fmt.Sprintf("%T %s gone", obj, obj.GetName()), timeout, func() (bool, error) {
		if del {
			err := tb.Client.Delete(ctx, obj, client.GracePeriodSeconds(0))
			if err != nil && !apierrors.IsNotFound(err) {
				return false, nil // the API server may be restarting
			}
			del = false
		}
		err := tb.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), nil
	})
}

// warned tells whether any of objs met a Warning event since start: the
// operation failed on the way and was retried.
func warned(objs []client.Object, since time.Time) bool {
	events := &corev1.EventList{}
	if err := tb.Client.List(ctx, events, client.InNamespace("default")); err != nil {
		return false
	}
	for _, e := range events.Items {
		if e.Type != corev1.EventTypeWarning || e.LastTimestamp.Time.Before(since.Add(-time.Second)) && e.EventTime.Time.Before(since.Add(-time.Second)) {
			continue
		}
		for _, o := range objs {
			if e.InvolvedObject.Name == o.GetName() {
				return true
			}
		}
	}
	return false
}

// chaos kills one target after another, waiting after each until the
// cluster serves again (a probe claim binds, a probe snapshot is ready, or
// a probe expansion lands, as the target's job is), until done.
func (s *storm) chaos(done <-chan struct{}) {
	for _, k := range s.plan.kills {
		select {
		case <-done:
			return
		case <-time.After(k.pause):
		}
		s.kill(k)
	}
}

// kill carries out one kill and measures the recovery.
func (s *storm) kill(k kill) {
	rec := recovery{target: k.target}
	start := time.Now()
	probeNode := ""
	switch k.target {
	case "control-plane":
		rec.instance = "etcd+kube-apiserver"
		s.logf("kill: etcd and kube-apiserver (SIGKILL), started again")
		if err := tb.RestartControlPlane(ctx); err != nil {
			s.t.Errorf("restart the control plane: %v", err)
			return
		}
	case "lvmd", "thinlvm-node":
		nodes := []string{cluster.VMNode, "node-a", "node-b"}
		probeNode = nodes[k.pick%uint64(len(nodes))]
		rec.instance = tb.NodeProcess(probeNode, k.target)
	default:
		var all []string
		for _, p := range tb.Procs() {
			if strings.HasPrefix(p, k.target+"@") {
				all = append(all, p)
			}
		}
		sort.Strings(all)
		if len(all) == 0 {
			s.t.Errorf("no %s to kill", k.target)
			return
		}
		rec.instance = all[k.pick%uint64(len(all))]
		// Of a replicated component, every other kill hits the leader
		// (leader election must hand over), the others a follower.
		s.mu.Lock()
		n := 0
		for _, r := range s.kills {
			if r.target == k.target {
				n++
			}
		}
		s.mu.Unlock()
		for _, p := range all {
			if leads(p) == (n%2 == 0) {
				rec.instance = p
				break
			}
		}
	}
	if k.target != "control-plane" {
		// Leader election tells replicas apart by their pod's hostname
		// (the sidecars) or by it and a random suffix (controller-runtime,
		// kube-scheduler).
		rec.leader = leads(rec.instance)
		s.logf("kill: %s (SIGKILL)", rec.instance)
		if err := tb.KillContainer(ctx, rec.instance); err != nil {
			s.t.Errorf("kill %s: %v", rec.instance, err)
			return
		}
	}
	var err error
	rec.took, err = s.probe(k.target, probeNode, start)
	if err != nil {
		rec.err = err.Error()
		s.t.Errorf("after killing %s: no recovery: %v", rec.instance, err)
	}
	s.logf("kill: %s (leader: %v) recovered in %v", rec.instance, rec.leader, rec.took.Round(time.Millisecond))
	s.mu.Lock()
	s.kills = append(s.kills, rec)
	s.mu.Unlock()
}

// leads tells whether a pod's container holds a lease of the component:
// leader election tells replicas apart by their pod's hostname (the
// sidecars) or by it and a random suffix (controller-runtime,
// kube-scheduler).
func leads(container string) bool {
	name, pod, _ := strings.Cut(container, "@")
	for lease, h := range leaseHolders() {
		if (h == pod || strings.HasPrefix(h, pod+"_")) && leaseOf(lease, name) {
			return true
		}
	}
	return false
}

// leaseOf tells whether a lease is the one the container elects a leader
// by: each component has its own (the controller's thinlvm-controller, the
// provisioner's thinlvm-io, external-resizer-thinlvm-io,
// external-snapshotter-leader-thinlvm-io, the scheduler's).
func leaseOf(lease, container string) bool {
	switch container {
	case "thinlvm-controller":
		return lease == "thinlvm-controller"
	case "csi-provisioner":
		return lease == "thinlvm-io"
	case "csi-resizer":
		return strings.HasPrefix(lease, "external-resizer")
	case "csi-snapshotter":
		return strings.HasPrefix(lease, "external-snapshotter")
	case "thinlvm-scheduler":
		return strings.Contains(lease, "scheduler")
	}
	return false
}

// leaseHolders are the holders of the leases of thinlvm's namespace (the
// controller's, the sidecars', the scheduler's), by lease.
func leaseHolders() map[string]string {
	out := map[string]string{}
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("coordination.k8s.io/v1")
	list.SetKind("LeaseList")
	if err := tb.Client.List(ctx, list); err != nil {
		return out
	}
	for _, l := range list.Items {
		h, _, _ := unstructured.NestedString(l.Object, "spec", "holderIdentity")
		out[l.GetName()] = h
	}
	return out
}

// probe waits until the killed component's work is done again: a claim
// binds (on node, when set), a snapshot is ready, an expansion lands. It
// returns the time from killed to then, and cleans up after.
func (s *storm) probe(target, node string, killed time.Time) (time.Duration, error) {
	done, err := s.probeOnce(target, node)
	if err != nil {
		return time.Since(killed), err
	}
	return done.Sub(killed), nil
}

func (s *storm) probeOnce(target, node string) (done time.Time, err error) {
	const timeout = 5 * time.Minute
	name := s.name("probe")
	v := &vol{name: name, class: cluster.BlockClass, block: true, size: resource.MustParse("64Mi")}
	var affinity *corev1.Affinity
	if node != "" {
		affinity = cluster.OnNode(node)
	}
	if err := s.create(v, affinity, nil); err != nil {
		return done, err
	}
	defer func() {
		if err := s.deleteVol(v, timeout); err != nil {
			s.t.Errorf("probe %s: %v", name, err)
		}
	}()
	if err := s.waitBound(v, timeout); err != nil {
		return done, err
	}
	switch target {
	case "csi-snapshotter":
		if err := createObject(cluster.VolumeSnapshot(name, name)); err != nil {
			return done, err
		}
		defer func() {
			if err := deleteAndWait(cluster.VolumeSnapshot(name, ""), timeout); err != nil {
				s.t.Errorf("probe snapshot %s: %v", name, err)
			}
		}()
		err = waitSnapshot(name, timeout)
	case "csi-resizer":
		err = expand(v, resource.MustParse("128Mi"), timeout)
	}
	return time.Now(), err
}

// retryAPI retries f on conflicts and while the API server cannot be
// reached (it may be restarting), for up to two minutes.
func retryAPI(f func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) ||
			apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// allUp waits until every container the storm killed runs again and the
// controller's and scheduler's leases are held.
func (s *storm) allUp() {
	err := tb.WaitFor(ctx, "every component up", 3*time.Minute, func() (bool, error) {
		for _, p := range tb.Procs() {
			if strings.Contains(p, "@") && !tb.Alive(p) {
				return false, nil
			}
		}
		h := leaseHolders()
		return h["thinlvm-controller"] != "", nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// invariants are what must hold after the storm.
type invariants struct {
	// OrphanLVs are thinlvm LVs without a LogicalVolume; LostLVs
	// LogicalVolumes whose LV is gone.
	OrphanLVs, LostLVs []string
	// Lost are volumes whose data did not read back; Checked counts those
	// read.
	Lost    []string
	Checked int
	// Stuck are objects that did not settle: claims Pending, objects
	// Terminating, snapshots not ready.
	Stuck []string
	// Reservations are the scheduler's reservations left.
	Reservations int
}

func (i invariants) total() int {
	return len(i.OrphanLVs) + len(i.LostLVs) + len(i.Lost) + len(i.Stuck) + i.Reservations
}

// invariants checks, after the storm has drained: nothing stuck, LVs and
// LogicalVolumes one for one on every node, every known pattern intact,
// no scheduler reservation left.
func (s *storm) invariants() invariants {
	var inv invariants
	// Stuck: give every object two minutes to settle first.
	_ = tb.WaitFor(ctx, "objects to settle", 2*time.Minute, func() (bool, error) {
		return len(stuck()) == 0, nil
	})
	inv.Stuck = stuck()

	lvs := &thinlvmv1.LogicalVolumeList{}
	if err := tb.Client.List(ctx, lvs); err != nil {
		s.t.Fatal(err)
	}
	byNode := map[string]map[string]bool{}
	for _, lv := range lvs.Items {
		if byNode[lv.Spec.NodeName] == nil {
			byNode[lv.Spec.NodeName] = map[string]bool{}
		}
		name := lv.Status.VolumeID
		if name == "" {
			name = thinlvmv1.LVNameOf(lv.Name)
		}
		byNode[lv.Spec.NodeName][name] = true
	}
	for _, node := range []string{cluster.VMNode, "node-a", "node-b"} {
		have, err := nodeLVs(node)
		if err != nil {
			s.t.Fatal(err)
		}
		for _, name := range have {
			if !byNode[node][name] {
				inv.OrphanLVs = append(inv.OrphanLVs, node+"/"+name)
			}
		}
		for name := range byNode[node] {
			if !slices.Contains(have, name) {
				inv.LostLVs = append(inv.LostLVs, node+"/"+name)
			}
		}
	}

	s.mu.Lock()
	vols := slices.Collect(maps.Values(s.vols))
	s.mu.Unlock()
	for _, v := range vols {
		if v.sum == "" || v.node != cluster.VMNode {
			continue
		}
		inv.Checked++
		got, err := s.readSum(v)
		if err != nil || got != v.sum {
			inv.Lost = append(inv.Lost, fmt.Sprintf("%s (%v)", v.name, err))
		}
	}
	inv.Reservations = reservations(s.t)
	return inv
}

// stuck lists the storm's objects that have not settled.
func stuck() []string {
	var out []string
	claims := &corev1.PersistentVolumeClaimList{}
	pvs := &corev1.PersistentVolumeList{}
	lvs := &thinlvmv1.LogicalVolumeList{}
	snaps := &unstructured.UnstructuredList{}
	snaps.SetAPIVersion("snapshot.storage.k8s.io/v1")
	snaps.SetKind("VolumeSnapshotList")
	contents := &unstructured.UnstructuredList{}
	contents.SetAPIVersion("snapshot.storage.k8s.io/v1")
	contents.SetKind("VolumeSnapshotContentList")
	for _, l := range []client.ObjectList{claims, pvs, lvs, snaps, contents} {
		if err := tb.Client.List(ctx, l); err != nil {
			return []string{"list: " + err.Error()}
		}
	}
	for _, c := range claims.Items {
		if c.Status.Phase != corev1.ClaimBound || c.DeletionTimestamp != nil {
			out = append(out, "PVC "+c.Name+" "+string(c.Status.Phase))
		}
	}
	for _, pv := range pvs.Items {
		if pv.Status.Phase != corev1.VolumeBound || pv.DeletionTimestamp != nil {
			out = append(out, "PV "+pv.Name+" "+string(pv.Status.Phase))
		}
	}
	for _, lv := range lvs.Items {
		if lv.DeletionTimestamp != nil || lv.Status.VolumeID == "" {
			out = append(out, "LogicalVolume "+lv.Name)
		}
	}
	for _, l := range []*unstructured.UnstructuredList{snaps, contents} {
		for _, u := range l.Items {
			ready, _, _ := unstructured.NestedBool(u.Object, "status", "readyToUse")
			if !ready || u.GetDeletionTimestamp() != nil {
				out = append(out, u.GetKind()+" "+u.GetName())
			}
		}
	}
	return out
}

// nodeLVs are the thinlvm volume LVs of a node (golden bases left out:
// they belong to GoldenImages, not LogicalVolumes).
func nodeLVs(node string) ([]string, error) {
	var names []string
	if node == cluster.VMNode {
		all, err := tb.VM.LVS(ctx, "vg0", "lv_tags")
		if err != nil {
			return nil, err
		}
		for name, f := range all {
			if strings.Contains(f[0], "thinlvm") {
				names = append(names, name)
			}
		}
	} else {
		var err error
		if names, err = tb.FakeLVs(node); err != nil {
			return nil, err
		}
	}
	return slices.DeleteFunc(names, func(n string) bool { return strings.HasPrefix(n, "gi-") }), nil
}

// readSum reads a VM node volume's first dataBytes in the guest.
func (s *storm) readSum(v *vol) (string, error) {
	lv, err := s.lvName(v)
	if err != nil {
		return "", err
	}
	file := "read-" + v.name
	defer os.Remove(filepath.Join(tb.VM.ShareDir(), file))
	// A thin LV made from an inactive origin may itself be inactive.
	if _, err := tb.VM.Run(ctx, "lvm", "lvchange", "-ay", "-K", "vg0/"+lv); err != nil {
		return "", err
	}
	if _, err := tb.VM.Run(ctx, "dd", "if=/dev/vg0/"+lv, "of=/share/"+file, "bs=1M", fmt.Sprintf("count=%d", dataBytes>>20), "iflag=direct", "status=none"); err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(tb.VM.ShareDir(), file))
	if err != nil {
		return "", err
	}
	return sum(b), nil
}

// failed counts the operations that failed for good.
func (s *storm) failed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.results {
		if !r.ok {
			n++
		}
	}
	return n
}

// report prints the storm's table.
func (s *storm) report(took time.Duration, inv invariants) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.log
	fmt.Fprintf(w, "\n=== storm seed %d: %d operations in %v ===\n", s.plan.seed, len(s.results), took.Round(time.Second))
	type counts struct{ ok, retried, failed int }
	byKind := map[string]*counts{}
	var okAll, retriedAll, failedAll int
	for _, r := range s.results {
		c := byKind[r.kind]
		if c == nil {
			c = &counts{}
			byKind[r.kind] = c
		}
		switch {
		case !r.ok:
			c.failed++
			failedAll++
		case r.retried:
			c.retried++
			retriedAll++
			c.ok++
			okAll++
		default:
			c.ok++
			okAll++
		}
	}
	fmt.Fprintf(w, "%-16s %6s %16s %15s\n", "operation", "ok", "of them retried", "failed for good")
	for _, k := range kinds {
		if c := byKind[k.name]; c != nil {
			fmt.Fprintf(w, "%-16s %6d %16d %15d\n", k.name, c.ok, c.retried, c.failed)
		}
	}
	fmt.Fprintf(w, "%-16s %6d %16d %15d\n", "all", okAll, retriedAll, failedAll)
	fmt.Fprintf(w, "\n%-20s %5s %10s %14s %14s\n", "killed (SIGKILL)", "kills", "of leader", "recovery p50", "recovery max")
	byTarget := map[string][]recovery{}
	for _, k := range s.kills {
		byTarget[k.target] = append(byTarget[k.target], k)
	}
	var worst recovery
	for _, t := range append(slices.Clone(targets), "control-plane") {
		rs := byTarget[t]
		if len(rs) == 0 {
			continue
		}
		var ds []time.Duration
		leader := 0
		for _, r := range rs {
			ds = append(ds, r.took)
			if r.leader {
				leader++
			}
			if r.took > worst.took {
				worst = r
			}
		}
		slices.Sort(ds)
		name := t
		if t == "control-plane" {
			name = "etcd+apiserver"
		}
		fmt.Fprintf(w, "%-20s %5d %10d %14v %14v\n", name, len(rs), leader, ds[len(ds)/2].Round(100*time.Millisecond), ds[len(ds)-1].Round(100*time.Millisecond))
	}
	fmt.Fprintf(w, "worst recovery: %v after killing %s\n", worst.took.Round(100*time.Millisecond), worst.instance)
	fmt.Fprintf(w, "\ninvariants: orphan LVs %d, LogicalVolumes without LV %d, lost data %d (of %d volumes checked), stuck objects %d, scheduler reservations %d\n",
		len(inv.OrphanLVs), len(inv.LostLVs), len(inv.Lost), inv.Checked, len(inv.Stuck), inv.Reservations)
	for _, l := range [][]string{inv.OrphanLVs, inv.LostLVs, inv.Lost, inv.Stuck} {
		for _, x := range l {
			fmt.Fprintf(w, "  %s\n", x)
		}
	}
	if failedAll > 0 {
		fmt.Fprintln(w, "operations that failed for good:")
		for _, r := range s.results {
			if !r.ok {
				fmt.Fprintf(w, "  %s: %s\n", r.kind, r.err)
			}
		}
	}
}

// cleanup deletes what the storm made and checks that every LV went.
func (s *storm) cleanup() {
	s.mu.Lock()
	vols := slices.Collect(maps.Values(s.vols))
	snaps := slices.Collect(maps.Keys(s.snaps))
	s.mu.Unlock()
	for _, n := range snaps {
		if err := deleteAndWait(cluster.VolumeSnapshot(n, ""), 3*time.Minute); err != nil {
			s.t.Error(err)
		}
	}
	for _, v := range vols {
		if err := s.deleteVol(v, 3*time.Minute); err != nil {
			s.t.Error(err)
		}
	}
	for _, node := range []string{cluster.VMNode, "node-a", "node-b"} {
		if err := tb.WaitFor(ctx, "no LV left on "+node, 2*time.Minute, func() (bool, error) {
			lvs, err := nodeLVs(node)
			return err == nil && len(lvs) == 0, nil
		}); err != nil {
			lvs, _ := nodeLVs(node)
			s.t.Errorf("after deleting every claim: LVs left on %s: %v", node, lvs)
		}
	}
}
