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
// It is indexed by node: Filter asks it for every node of every cycle.
type ledger struct {
	mu     sync.RWMutex
	byNode map[string]map[types.UID]reservation
	nodeOf map[types.UID]string
	ttl    time.Duration
	now    func() time.Time
}

func newLedger(ttl time.Duration) *ledger {
	return &ledger{byNode: map[string]map[types.UID]reservation{}, nodeOf: map[types.UID]string{}, ttl: ttl, now: time.Now}
}

func (l *ledger) reserve(pod types.UID, r reservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(pod)
	r.at = l.now()
	if l.byNode[r.node] == nil {
		l.byNode[r.node] = map[types.UID]reservation{}
	}
	l.byNode[r.node][pod] = r
	l.nodeOf[pod] = r.node
}

func (l *ledger) release(pod types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(pod)
}

func (l *ledger) dropLocked(pod types.UID) {
	node, ok := l.nodeOf[pod]
	if !ok {
		return
	}
	delete(l.nodeOf, pod)
	delete(l.byNode[node], pod)
	if len(l.byNode[node]) == 0 {
		delete(l.byNode, node)
	}
}

// held sums, per node and device class, what the ledger holds: one pass
// per scheduling cycle, so that Filter and Score, called for every node,
// read a plain map and take no lock. settled and expired reservations are
// dropped on the way.
func (l *ledger) held(settled func(reservation) bool) map[string]map[string]int64 {
	l.mu.RLock()
	if len(l.byNode) == 0 {
		l.mu.RUnlock()
		return nil
	}
	out := make(map[string]map[string]int64, len(l.byNode))
	var drop []types.UID
	now := l.now()
	for node, rs := range l.byNode {
		for uid, r := range rs {
			if now.Sub(r.at) > l.ttl || settled(r) {
				drop = append(drop, uid)
				continue
			}
			if out[node] == nil {
				out[node] = map[string]int64{}
			}
			for class, b := range r.bytes {
				out[node][class] += b
			}
		}
	}
	l.mu.RUnlock()
	if len(drop) > 0 {
		l.mu.Lock()
		for _, uid := range drop {
			l.dropLocked(uid)
		}
		l.mu.Unlock()
	}
	return out
}

func (l *ledger) len() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.nodeOf)
}
