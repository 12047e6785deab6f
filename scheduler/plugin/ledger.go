package plugin

import (
	"container/heap"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/thinlvm/thinlvm/internal/sizes"
)

// reservation is what one pod was promised on one node.
type reservation struct {
	pod    types.UID
	node   string
	bytes  map[string]int64 // by device class
	lvs    map[string]int   // new volumes by device class
	claims []string         // namespace/name of the pod's thinlvm claims
	at     time.Time
	// recheck is when to ask again whether the node reports the volumes.
	recheck time.Time
	// index is the reservation's place in the ledger's due queue.
	index int
}

// due is when a sweep next has something to do with r: ask whether it
// settled, or drop it as expired.
func (r *reservation) due(ttl time.Duration) time.Time {
	if exp := r.at.Add(ttl); exp.Before(r.recheck) {
		return exp
	}
	return r.recheck
}

// dueQueue orders reservations by due time (a container/heap).
type dueQueue struct {
	rs  []*reservation
	ttl time.Duration
}

func (q *dueQueue) Len() int           { return len(q.rs) }
func (q *dueQueue) Less(i, j int) bool { return q.rs[i].due(q.ttl).Before(q.rs[j].due(q.ttl)) }
func (q *dueQueue) Swap(i, j int) {
	q.rs[i], q.rs[j] = q.rs[j], q.rs[i]
	q.rs[i].index, q.rs[j].index = i, j
}
func (q *dueQueue) Push(x any) {
	r := x.(*reservation)
	r.index = len(q.rs)
	q.rs = append(q.rs, r)
}
func (q *dueQueue) Pop() any {
	r := q.rs[len(q.rs)-1]
	q.rs[len(q.rs)-1] = nil
	q.rs = q.rs[:len(q.rs)-1]
	r.index = -1
	return r
}

// nodeClass keys what is held on one device class of one node.
type nodeClass struct{ node, class string }

// recheckAfter is how long a reservation found not yet reported is counted
// without asking again: settling is a few lister reads per claim, and a
// burst holds one reservation per pod, so asking every cycle would cost
// O(pods) lookups per pod. Counting a settled reservation a little longer
// only errs on the safe side.
const recheckAfter = 500 * time.Millisecond

// ledger holds the bytes reserved for pods that the LVMNode status does
// not show yet, so that a burst of pods cannot all fit into the same room.
// It keeps the sum per node and device class as reservations come and go:
// Filter and Score ask for it for every node of every cycle. Sweeps, one
// per cycle, take only the reservations that are due from a queue ordered
// by due time: a burst holds one reservation per pod, and walking them
// all would cost O(pods) per pod.
type ledger struct {
	mu      sync.RWMutex
	pods    map[types.UID]*reservation
	queue   dueQueue
	sums    map[nodeClass]held
	ttl     time.Duration
	recheck time.Duration
	now     func() time.Time
	// count, when set, is told how many pods hold a reservation after
	// every change.
	count func(int)
}

func newLedger(ttl time.Duration) *ledger {
	return &ledger{pods: map[types.UID]*reservation{}, queue: dueQueue{ttl: ttl}, sums: map[nodeClass]held{},
		ttl: ttl, recheck: recheckAfter, now: time.Now}
}

func (l *ledger) reserve(pod types.UID, r reservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(pod)
	r.pod = pod
	r.at = l.now()
	r.recheck = r.at
	l.pods[pod] = &r
	heap.Push(&l.queue, &r)
	// A reservation follows a passed Filter, so b is at most a node's
	// room and the sums stay far from overflow; sizes.Add keeps it so.
	for class, b := range r.bytes {
		l.addLocked(nodeClass{r.node, class}, held{bytes: b})
	}
	for class, n := range r.lvs {
		l.addLocked(nodeClass{r.node, class}, held{lvs: n})
	}
	l.countLocked()
}

func (l *ledger) countLocked() {
	if l.count != nil {
		l.count(len(l.pods))
	}
}

func (l *ledger) release(pod types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(pod)
	l.countLocked()
}

func (l *ledger) dropLocked(pod types.UID) {
	r, ok := l.pods[pod]
	if !ok {
		return
	}
	delete(l.pods, pod)
	if r.index >= 0 {
		heap.Remove(&l.queue, r.index)
	}
	for class, b := range r.bytes {
		l.addLocked(nodeClass{r.node, class}, held{bytes: -b})
	}
	for class, n := range r.lvs {
		l.addLocked(nodeClass{r.node, class}, held{lvs: -n})
	}
}

// addLocked adds d to a node's device class's sums; a sum back at zero is
// dropped.
func (l *ledger) addLocked(k nodeClass, d held) {
	h := l.sums[k]
	h.bytes = sizes.Add(h.bytes, d.bytes)
	h.lvs += d.lvs
	if h == (held{}) {
		delete(l.sums, k)
	} else {
		l.sums[k] = h
	}
}

// sweep drops expired reservations and those settled tells are now part of
// their node's reported capacity. It runs once per scheduling cycle
// (PreFilter), and every second when no pod is scheduled.
func (l *ledger) sweep(settled func(reservation) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.countLocked()
	now := l.now()
	var later []*reservation
	for l.queue.Len() > 0 && !now.Before(l.queue.rs[0].due(l.ttl)) {
		r := heap.Pop(&l.queue).(*reservation)
		switch {
		case now.Sub(r.at) > l.ttl:
			l.dropLocked(r.pod)
		case now.Before(r.recheck):
			later = append(later, r) // due by its TTL's end, not past it yet
		case settled(*r):
			l.dropLocked(r.pod)
		default:
			r.recheck = now.Add(l.recheck)
			later = append(later, r)
		}
	}
	for _, r := range later {
		heap.Push(&l.queue, r)
	}
}

// held is what the ledger holds on a node's device class: bytes, and new
// volumes (each takes room in its VG's metadata area).
type held struct {
	bytes int64
	lvs   int
}

// reserved is what the ledger holds on a node's device class: one lookup
// for both sums, as Filter and Score ask for every node of every cycle.
func (l *ledger) reserved(node, class string) held {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.sums[nodeClass{node, class}]
}

func (l *ledger) len() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.pods)
}
