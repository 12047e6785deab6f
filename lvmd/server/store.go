package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
)

// view is one published state of the volume groups: an lvm report, possibly
// amended by mutations that lvmd made since it was read.
type view struct {
	report *lvm.Report
	// generation increases with every published view.
	generation uint64
	// fresh is true when the view is exactly what lvm reported.
	fresh bool
}

// store owns the cached lvm report. Mutations and report refreshes hold mu,
// so lvm commands never run concurrently; reads load the current view with
// no lock and start no process.
type store struct {
	lvm *lvm.Client
	vgs []string
	log logr.Logger

	// debounce is how long the refresher waits after the last mutation, so
	// that a burst of mutations is followed by one report, not one each;
	// maxStale bounds that wait. interval refreshes an idle store, since data
	// use changes as volumes are written.
	debounce, maxStale, interval time.Duration

	mu      sync.Mutex
	pending atomic.Int32 // callers waiting for or holding mu
	lastEnd atomic.Int64 // unix nanoseconds the last mutation released mu
	view    atomic.Pointer[view]
	dirty   chan struct{}

	subsMu sync.Mutex
	subs   map[chan struct{}]struct{}

	// onPublish, when set, is called with every published view (metrics).
	onPublish func(*view)
	// afterRefresh, when set, is called with mu held after every refresh;
	// it may run mutations (pool autoextend) and report whether it did.
	afterRefresh func(ctx context.Context, r *lvm.Report) bool
}

func newStore(client *lvm.Client, vgs []string, log logr.Logger) *store {
	return &store{
		lvm: client, vgs: vgs, log: log,
		debounce: 200 * time.Millisecond, maxStale: 2 * time.Second, interval: 30 * time.Second,
		dirty: make(chan struct{}, 1),
		subs:  map[chan struct{}]struct{}{},
	}
}

// current returns the published view.
func (s *store) current() *view { return s.view.Load() }

// lock takes the mutation lock; the returned func releases it.
func (s *store) lock() (unlock func()) {
	s.pending.Add(1)
	s.mu.Lock()
	return func() {
		s.lastEnd.Store(time.Now().UnixNano())
		s.pending.Add(-1)
		s.mu.Unlock()
	}
}

// publish makes r the current view and wakes the watchers. Called with mu
// held (or before the store is shared).
func (s *store) publish(r *lvm.Report, fresh bool) *view {
	var gen uint64 = 1
	if old := s.view.Load(); old != nil {
		gen = old.generation + 1
	}
	v := &view{report: r, generation: gen, fresh: fresh}
	s.view.Store(v)
	if s.onPublish != nil {
		s.onPublish(v)
	}
	s.subsMu.Lock()
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default: // the watcher has a wake-up pending; it reads the latest view
		}
	}
	s.subsMu.Unlock()
	return v
}

// amend publishes a copy of the current view changed by fn, after a
// mutation that lvm confirmed, and asks for a refresh. Called with mu held.
func (s *store) amend(fn func(r *lvm.Report)) {
	r := s.current().report.Clone()
	fn(r)
	s.publish(r, false)
	s.markDirty()
}

func (s *store) markDirty() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// refreshLocked reads a new report and publishes it. Called with mu held.
func (s *store) refreshLocked(ctx context.Context) error {
	r, err := s.lvm.FullReport(ctx, s.vgs)
	if err != nil {
		return err
	}
	s.publish(r, true)
	if s.afterRefresh != nil && s.afterRefresh(ctx, r) {
		r, err := s.lvm.FullReport(ctx, s.vgs)
		if err != nil {
			return err
		}
		s.publish(r, true)
	}
	return nil
}

// refresh takes the lock and refreshes.
func (s *store) refresh(ctx context.Context) error {
	unlock := s.lock()
	defer unlock()
	return s.refreshLocked(ctx)
}

// run refreshes the report after mutations, coalesced, and every interval
// when idle, until ctx ends.
func (s *store) run(ctx context.Context) {
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.dirty:
			s.waitQuiet(ctx)
		case <-tick.C:
			// An amended view has a refresh coming (dirty); a fresh one
			// that a mutation just confirmed needs none yet.
			if v := s.current(); v == nil || !v.fresh || time.Since(time.Unix(0, s.lastEnd.Load())) < s.interval/2 {
				continue
			}
		}
		start := time.Now()
		if err := s.refresh(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Error(err, "refresh lvm report failed; retrying")
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				s.markDirty()
			}
			continue
		}
		s.log.V(3).Info("lvm report refreshed", "generation", s.current().generation, "duration", time.Since(start))
	}
}

// waitQuiet waits until no mutation is queued and none ended within
// debounce, or maxStale has passed.
func (s *store) waitQuiet(ctx context.Context) {
	deadline := time.Now().Add(s.maxStale)
	for time.Now().Before(deadline) {
		busy := s.pending.Load() > 0 || time.Since(time.Unix(0, s.lastEnd.Load())) < s.debounce
		if !busy {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.debounce / 5):
		}
	}
}

// subscribe returns a channel woken after each publish, and its cancel.
func (s *store) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.subsMu.Lock()
	s.subs[ch] = struct{}{}
	s.subsMu.Unlock()
	return ch, func() {
		s.subsMu.Lock()
		delete(s.subs, ch)
		s.subsMu.Unlock()
	}
}
