package plugin

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/thinlvm/thinlvm/api/sizes"
)

// reservation is what one pod was promised on one node.
type reservation struct {
	node   string
	bytes  map[string]int64 // by device class
	lvs    map[string]int   // new volumes by device class
	claims []string         // namespace/name of the pod's thinlvm claims
	at     time.Time
	// recheck is when to ask again whether the node reports the volumes.
	recheck time.Time
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
// Filter and Score ask for it for every node of every cycle.
type ledger struct {
	mu      sync.RWMutex
	pods    map[types.UID]*reservation
	sums    map[nodeClass]int64
	lvSums  map[nodeClass]int
	ttl     time.Duration
	recheck time.Duration
	now     func() time.Time
	// count, when set, is told how many pods hold a reservation after
	// every change.
	count func(int)
}

func newLedger(ttl time.Duration) *ledger {
	return &ledger{pods: map[types.UID]*reservation{}, sums: map[nodeClass]int64{}, lvSums: map[nodeClass]int{},
		ttl: ttl, recheck: recheckAfter, now: time.Now}
}

func (l *ledger) reserve(pod types.UID, r reservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(pod)
	r.at = l.now()
	r.recheck = r.at
	l.pods[pod] = &r
	// A reservation follows a passed Filter, so b is at most a node's
	// room and the sums stay far from overflow; sizes.Add keeps it so.
	for class, b := range r.bytes {
		k := nodeClass{r.node, class}
		l.sums[k] = sizes.Add(l.sums[k], b)
	}
	for class, n := range r.lvs {
		l.lvSums[nodeClass{r.node, class}] += n
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
	for class, b := range r.bytes {
		k := nodeClass{r.node, class}
		if l.sums[k] -= b; l.sums[k] == 0 {
			delete(l.sums, k)
		}
	}
	for class, n := range r.lvs {
		k := nodeClass{r.node, class}
		if l.lvSums[k] -= n; l.lvSums[k] == 0 {
			delete(l.lvSums, k)
		}
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
	for uid, r := range l.pods {
		switch {
		case now.Sub(r.at) > l.ttl:
			l.dropLocked(uid)
		case now.Before(r.recheck):
		case settled(*r):
			l.dropLocked(uid)
		default:
			r.recheck = now.Add(l.recheck)
		}
	}
}

// reserved is what the ledger holds on a node's device class.
func (l *ledger) reserved(node, class string) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.sums[nodeClass{node, class}]
}

// reservedLVs is how many new volumes the ledger holds on a node's device
// class.
func (l *ledger) reservedLVs(node, class string) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.lvSums[nodeClass{node, class}]
}

func (l *ledger) len() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.pods)
}
