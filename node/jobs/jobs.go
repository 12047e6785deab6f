// Package jobs runs the node agent's keyed background jobs: a copy of a
// volume from another node, a golden base's population. A job outlives the
// reconcile that started it, at most one runs per key, and its reconciler
// cancels it by key, or all of them when the agent stops.
package jobs

import (
	"context"
	"sync"
)

// Job is one running (or ended) job with its state S.
type Job[S any] struct {
	// State is the job's own, set at Start; the job and its reconciler
	// share it (S guards itself).
	State  S
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done closes
}

// Cancel asks the job to end; Done tells when it has.
func (j *Job[S]) Cancel() { j.cancel() }

// Done is closed when the job has ended.
func (j *Job[S]) Done() <-chan struct{} { return j.done }

// Ended tells whether the job has ended, without waiting.
func (j *Job[S]) Ended() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// Err is the job's result; valid once Done is closed.
func (j *Job[S]) Err() error { return j.err }

// Set holds the jobs of one reconciler by key. The zero Set is empty and
// ready; it is safe for concurrent use.
type Set[S any] struct {
	mu   sync.Mutex
	jobs map[string]*Job[S]
}

// Start runs run as key's job with state, in a context that keeps ctx's
// values but not its cancellation (the job outlives the reconcile), and
// replaces any job the Set held for key. ended, when set, runs after run
// returned (its error is the job's Err) and before Done closes. A job stays in the
// Set after it ended until Forget or Stop: its reconciler collects the
// result.
func (s *Set[S]) Start(ctx context.Context, key string, state S, run func(context.Context, *Job[S]) error, ended func(*Job[S])) *Job[S] {
	jctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	j := &Job[S]{State: state, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	if s.jobs == nil {
		s.jobs = map[string]*Job[S]{}
	}
	s.jobs[key] = j
	s.mu.Unlock()
	go func() {
		defer close(j.done)
		defer cancel()
		j.err = run(jctx, j)
		if ended != nil {
			ended(j)
		}
	}()
	return j
}

// Get is key's job, running or ended; nil for none.
func (s *Set[S]) Get(key string) *Job[S] {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs[key]
}

// Forget drops key's job from the Set, if it is j (nil: whichever): a
// job's result, once collected, or an ended job's place.
func (s *Set[S]) Forget(key string, j *Job[S]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.jobs[key]; cur != nil && (j == nil || cur == j) {
		delete(s.jobs, key)
	}
}

// Stop cancels key's job, if any, waits until it ended, and forgets it.
func (s *Set[S]) Stop(key string) {
	j := s.Get(key)
	if j == nil {
		return
	}
	j.Cancel()
	<-j.done
	s.Forget(key, j)
}

// StopAll stops every job: the agent is stopping.
func (s *Set[S]) StopAll() {
	s.mu.Lock()
	keys := make([]string, 0, len(s.jobs))
	for k := range s.jobs {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	for _, k := range keys {
		s.Stop(k)
	}
}
