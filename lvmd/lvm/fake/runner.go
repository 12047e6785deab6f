package fake

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
)

// lvm2's exit codes (tools/errors.h).
const (
	// ExitFailed is ECMD_FAILED, what lvm2 exits with when a command fails.
	ExitFailed = 5
	// ExitInvalidCommandLine is EINVALID_CMD_LINE; the fake also uses it for
	// arguments it does not understand.
	ExitInvalidCommandLine = 3
)

// Failure makes a command fail without changing anything.
type Failure struct {
	// Subcommand is the lvm subcommand (args[0]) that fails; empty for any.
	Subcommand string
	// ExitCode is 0 for ExitFailed.
	ExitCode int
	Stderr   string
	// OutcomeUnknown: the command takes effect, and then Run returns an
	// error wrapping lvm.ErrOutcomeUnknown, as lvm.ShellRunner does when
	// the shell dies before it reports (ExitCode and Stderr are unused).
	OutcomeUnknown bool
}

// Runner is an in-memory lvm.Runner. Set its fields before the first Run;
// afterwards read and change its state only through its methods, which are
// safe for concurrent use.
type Runner struct {
	// VGs, Pools and LVs are the simulated state.
	VGs   []VG
	Pools []Pool
	LVs   []LV
	// DevDir, when set, backs every thin LV by a sparse file of its size,
	// DevDir/<vg>/<lv> (its device path), which a thin snapshot copies and
	// lvremove removes: code that writes to devices runs in unit tests.
	DevDir string
	// Failures fail the next matching commands, first first.
	Failures []Failure
	// OnRun, when set, is called with every started command's context and
	// arguments before the command changes anything, without the Runner's
	// lock held. It may block, as a slow lvm would: like lvm.ExecRunner,
	// Run then returns an *lvm.StillRunningError when ctx ends, and the
	// command still completes when OnRun returns.
	OnRun func(ctx context.Context, args []string)

	mu     sync.Mutex
	calls  [][]string
	counts map[string]int
	nextID int
	// held are the pools ("vg/pool") that hold a metadata snapshot.
	held map[string]bool
}

var _ lvm.Runner = (*Runner)(nil)

// Run implements lvm.Runner. A command whose context has ended is not
// started: it is not recorded and changes nothing.
func (r *Runner) Run(ctx context.Context, args ...string) ([]byte, error) {
	args = withoutMonitoring(args)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake lvm %s: not started: %w", strings.Join(args, " "), err)
	}
	// The command runs here as lvm.ExecRunner's process does: to its end,
	// whether or not Run still waits for it.
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		defer close(done)
		if r.OnRun != nil {
			r.OnRun(ctx, args)
		}
		out, err = r.run(args)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		select {
		case <-done:
		default:
			return nil, &lvm.StillRunningError{Args: args, Done: done, Err: ctx.Err()}
		}
	}
	return out, err
}

// withoutMonitoring is a copy of args without the "activation/monitoring=0"
// a containerized lvmd gives every command (lvm.ExecRunner.Config): there
// is no dmeventd to simulate. A --config left empty goes too.
func withoutMonitoring(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if args[i] == "--config" && i+1 < len(args) {
			v := strings.Join(slices.DeleteFunc(strings.Fields(args[i+1]), func(f string) bool { return f == "activation/monitoring=0" }), " ")
			i++
			if v != "" {
				out = append(out, "--config", v)
			}
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// run simulates one command.
func (r *Runner) run(args []string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, args)
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[sub]++
	unknown := false
	for i, f := range r.Failures {
		if f.Subcommand == "" || f.Subcommand == sub {
			r.Failures = slices.Delete(r.Failures, i, i+1)
			if f.OutcomeUnknown {
				unknown = true
				break
			}
			code := f.ExitCode
			if code == 0 {
				code = ExitFailed
			}
			return nil, &lvm.CommandError{Args: args, ExitCode: code, Stderr: f.Stderr}
		}
	}
	for i := range r.LVs { // the LVs a test set or added, in their order
		r.thinID(&r.LVs[i])
	}
	c := &command{args: args}
	var out string
	var err error
	switch sub {
	case "fullreport":
		out, err = r.fullReport(c)
	case "lvcreate":
		out, err = r.lvcreate(c)
	case "lvextend":
		out, err = r.lvextend(c)
	case "lvremove":
		out, err = r.lvremove(c)
	case "lvchange":
		out, err = r.lvchange(c)
	case lvm.ToolDMSetup:
		out, err = r.dmsetup(c)
	case lvm.ToolThinDelta:
		out, err = r.thinDelta(c)
	default:
		err = c.unsupported("subcommand %q", sub)
	}
	if unknown {
		return nil, fmt.Errorf("fake lvm %s: %w", strings.Join(args, " "), lvm.ErrOutcomeUnknown)
	}
	if err != nil {
		return nil, err
	}
	return []byte(out), nil
}

// Calls returns the arguments of every command run so far, in order; a
// command blocked in OnRun is not yet in it.
func (r *Runner) Calls() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][]string, len(r.calls))
	for i, c := range r.calls {
		out[i] = slices.Clone(c)
	}
	return out
}

// Count returns how many times subcommand ran (failed runs included).
func (r *Runner) Count(subcommand string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[subcommand]
}

// Total returns how many commands ran.
func (r *Runner) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// FailNext makes the next command of f.Subcommand fail, after the
// failures already queued for it.
func (r *Runner) FailNext(f Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Failures = append(r.Failures, f)
}
