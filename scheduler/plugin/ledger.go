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
}

// ledger holds the bytes reserved for pods that the LVMNode status does
// not show yet, so that a burst of pods cannot all fit into the same room.
type ledger struct {
	mu   sync.Mutex
	pods map[types.UID]reservation
	ttl  time.Duration
	now  func() time.Time
}

func newLedger(ttl time.Duration) *ledger {
	return &ledger{pods: map[types.UID]reservation{}, ttl: ttl, now: time.Now}
}

func (l *ledger) reserve(pod types.UID, r reservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.at = l.now()
	l.pods[pod] = r
}

func (l *ledger) release(pod types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pods, pod)
}

// reserved sums what is held on node for class. settled tells whether a
// reservation is now part of the node's reported capacity; settled and
// expired reservations are dropped.
func (l *ledger) reserved(node, class string, settled func(reservation) bool) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var sum int64
	now := l.now()
	for uid, r := range l.pods {
		if r.node != node {
			continue
		}
		if now.Sub(r.at) > l.ttl || settled(r) {
			delete(l.pods, uid)
			continue
		}
		sum += r.bytes[class]
	}
	return sum
}

func (l *ledger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pods)
}
