package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// store owns the cached lvm report and the lock that serialises lvm
// commands. Mutations and report refreshes hold the lock, so lvm commands
// never run concurrently; reads load the current view with no lock and start
// no process.
//
// lvm commands are never killed (lvm.Runner), only waited for, and a holder
// may stop waiting for one: the lock then stays held until that command
// ends, and the report is re-read before the next mutation decides anything.
type store struct {
	lvm *lvm.Client
	vgs []string
	log logr.Logger

	// timeout bounds a background refresh: the wait for the lock, the
	// report and the pool autoextend it may run. Without it a refresh
	// stuck behind a hung lvm would hold the refresher forever; with it
	// the refresher gives up waiting, logs and tries again.
	timeout time.Duration

	// debounce is how long the refresher waits after the last mutation, so
	// that a burst of mutations is followed by one report, not one each;
	// maxStale bounds that wait. interval refreshes an idle store, since data
	// use changes as volumes are written.
	debounce, maxStale, interval time.Duration

	// sem is the lock: a channel, not a sync.Mutex, so that a wait for it
	// can end with its caller's context.
	sem     chan struct{}
	pending atomic.Int32 // callers waiting for or holding the lock
	lastEnd atomic.Int64 // unix nanoseconds the last holder released the lock
	view    atomic.Pointer[view]
	dirty   chan struct{}

	// running are the commands the holder stopped waiting for; guarded by
	// the lock. stale is set, with the lock held, when such a command has
	// ended: the view may not show what it did. A refresh clears it.
	running []*lvm.StillRunningError
	stale   bool

	subsMu sync.Mutex
	subs   map[chan struct{}]struct{}

	// onPublish, when set, is called with every published view (metrics).
	onPublish func(*view)
	// afterRefresh, when set, is called with the lock held after every
	// refresh; it may run mutations (pool autoextend) and report whether it
	// did.
	afterRefresh func(ctx context.Context, r *lvm.Report) bool
}

// newStore makes a store whose client runs commands through runner, bounding
// background refreshes by timeout.
func newStore(runner lvm.Runner, vgs []string, timeout time.Duration, log logr.Logger) *store {
	s := &store{
		vgs: vgs, log: log, timeout: timeout,
		debounce: 200 * time.Millisecond, maxStale: 2 * time.Second, interval: 30 * time.Second,
		sem:   make(chan struct{}, 1),
		dirty: make(chan struct{}, 1),
		subs:  map[chan struct{}]struct{}{},
	}
	s.lvm = &lvm.Client{Runner: &tracker{inner: runner, s: s}}
	return s
}

// current returns the published view.
func (s *store) current() *view { return s.view.Load() }

// lock takes the lock; the returned func releases it. A caller whose ctx
// ends while it waits gets an error wrapping ctx's and holds nothing. One
// whose ctx has ended by the time it gets the lock gives it back at once, so
// that a caller that went away never starts a command.
func (s *store) lock(ctx context.Context) (unlock func(), err error) {
	s.pending.Add(1)
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		s.pending.Add(-1)
		return nil, fmt.Errorf("wait for the lvm lock: %w", ctx.Err())
	}
	if err := ctx.Err(); err != nil { // both were ready, and select chose the lock
		s.pending.Add(-1)
		<-s.sem
		return nil, fmt.Errorf("wait for the lvm lock: %w", err)
	}
	return s.unlock, nil
}

// unlock releases the lock. When the holder stopped waiting for commands
// that still run, the lock is released only once they have ended, so that no
// other lvm command runs beside them; the store is then stale and a refresh
// is asked for.
func (s *store) unlock() {
	running := s.running
	s.running = nil
	if len(running) == 0 {
		s.release()
		return
	}
	// This goroutine holds the lock for the commands; it lives as long as
	// they run.
	go func() {
		for _, r := range running {
			<-r.Done
			s.log.Info("lvm command that lvmd stopped waiting for has ended; re-reading the report", "command", strings.Join(r.Args, " "))
		}
		s.stale = true
		s.release()
		s.markDirty()
	}()
}

func (s *store) release() {
	s.lastEnd.Store(time.Now().UnixNano())
	s.pending.Add(-1)
	<-s.sem
}

// tracker is the Runner under the store's client: it keeps the commands that
// the lock holder stopped waiting for (see unlock) and starts no command
// while one of them runs. Every command runs with the lock held.
type tracker struct {
	inner lvm.Runner
	s     *store
}

var _ lvm.Runner = (*tracker)(nil)

// Run implements lvm.Runner.
func (t *tracker) Run(ctx context.Context, args ...string) ([]byte, error) {
	// The lock already keeps other holders out; this keeps the holder itself
	// from starting a command, under a context that has not ended, beside
	// one it stopped waiting for under another.
	for _, r := range t.s.running {
		select {
		case <-r.Done:
		case <-ctx.Done():
			return nil, fmt.Errorf("lvm %s not started while lvm %s runs on: %w", strings.Join(args, " "), strings.Join(r.Args, " "), ctx.Err())
		}
	}
	out, err := t.inner.Run(ctx, args...)
	var still *lvm.StillRunningError
	if errors.As(err, &still) {
		t.s.running = append(t.s.running, still)
	}
	if errors.Is(err, lvm.ErrOutcomeUnknown) {
		// The command may or may not have changed lvm: the view is not
		// trusted until it is read again.
		t.s.stale = true
		t.s.markDirty()
	}
	return out, err
}

// publish makes r the current view and wakes the watchers. Called with the
// lock held (or before the store is shared).
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
// mutation that lvm confirmed, and asks for a refresh. Called with the lock
// held.
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

// refreshLocked reads a new report and publishes it. Called with the lock
// held.
func (s *store) refreshLocked(ctx context.Context) error {
	r, err := s.read(ctx)
	if err != nil {
		return err
	}
	s.publish(r, true)
	s.stale = false
	if s.afterRefresh != nil && s.afterRefresh(ctx, r) {
		r, err := s.read(ctx)
		if err != nil {
			return err
		}
		s.publish(r, true)
	}
	return nil
}

// read reports the configured volume groups. lvm refuses the report when
// one of them is missing (a node without the VG, or before an
// administrator made it): then read lists the VGs there are and reports
// those, so that the missing VG's device class is unavailable (capacity)
// and the others serve; every refresh looks for it again.
func (s *store) read(ctx context.Context) (*lvm.Report, error) {
	r, err := s.lvm.FullReport(ctx, s.vgs)
	if err == nil || !errors.Is(err, lvm.ErrNotFound) {
		return r, err
	}
	there, lerr := s.lvm.VGNames(ctx)
	if lerr != nil {
		return nil, fmt.Errorf("%w; then: %w", err, lerr)
	}
	var vgs []string
	for _, vg := range s.vgs {
		if slices.Contains(there, vg) {
			vgs = append(vgs, vg)
		}
	}
	if len(vgs) == 0 {
		return &lvm.Report{}, nil // lvm would report every VG
	}
	return s.lvm.FullReport(ctx, vgs)
}

// freshenLocked re-reads the report when it is stale: a mutation decides
// on what lvm holds, not on a view that a command lvmd stopped waiting for
// may have made wrong. Called with the lock held.
func (s *store) freshenLocked(ctx context.Context) error {
	if !s.stale {
		return nil
	}
	if err := s.refreshLocked(ctx); err != nil {
		return fmt.Errorf("re-read the report after an lvm command that outlasted its wait: %w", err)
	}
	return nil
}

// refresh takes the lock and refreshes.
func (s *store) refresh(ctx context.Context) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
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
		rctx, cancel := context.WithTimeout(ctx, s.timeout)
		err := s.refresh(rctx)
		cancel()
		if err != nil {
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
