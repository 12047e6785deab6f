package plugin

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// reservation is what one pod was promised on one node.
type reservation struct {
	node   string
	bytes  map[string]int64 // by device class
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
type ledger struct {
	mu      sync.Mutex
	pods    map[types.UID]*reservation
	ttl     time.Duration
	recheck time.Duration
	now     func() time.Time
}

func newLedger(ttl time.Duration) *ledger {
	return &ledger{pods: map[types.UID]*reservation{}, ttl: ttl, recheck: recheckAfter, now: time.Now}
}

func (l *ledger) reserve(pod types.UID, r reservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.at = l.now()
	r.recheck = r.at
	l.pods[pod] = &r
}

func (l *ledger) release(pod types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pods, pod)
}

// held sums what the ledger holds per node and device class, dropping
// expired reservations and those settled tells are now part of their node's
// reported capacity. It runs once per scheduling cycle (PreFilter), so that
// Filter and Score, called for every node, read a plain map and take no
// lock.
func (l *ledger) held(settled func(reservation) bool) map[nodeClass]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pods) == 0 {
		return nil
	}
	out := make(map[nodeClass]int64, len(l.pods))
	now := l.now()
	for uid, r := range l.pods {
		if now.Sub(r.at) > l.ttl {
			delete(l.pods, uid)
			continue
		}
		if !now.Before(r.recheck) {
			if settled(*r) {
				delete(l.pods, uid)
				continue
			}
			r.recheck = now.Add(l.recheck)
		}
		for class, b := range r.bytes {
			out[nodeClass{r.node, class}] += b
		}
	}
	return out
}

func (l *ledger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pods)
}
