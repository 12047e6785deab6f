package csi

import "sync"

// keyLock is a set of per-key try-locks: a second operation on a volume
// that is busy fails at once (Aborted) instead of queueing behind it.
type keyLock struct {
	mu   sync.Mutex
	held map[string]struct{}
}

func (l *keyLock) tryLock(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		l.held = map[string]struct{}{}
	}
	if _, ok := l.held[key]; ok {
		return false
	}
	l.held[key] = struct{}{}
	return true
}

func (l *keyLock) unlock(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, key)
}
