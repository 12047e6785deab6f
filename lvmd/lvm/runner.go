package lvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Runner runs one lvm command (lvm's first argument is the subcommand, e.g.
// "lvcreate") and returns its standard output. A first argument ToolDMSetup
// or ToolThinDelta runs that device-mapper tool instead, with the arguments
// after it: they go through the same seam, lock and metrics as lvm. A failed
// command returns a *CommandError.
//
// A Runner must never kill a command it started: lvm killed in the middle
// of a device-mapper suspend can leave a thin pool suspended, and then every
// I/O to it hangs until someone resumes it by hand. ctx bounds the wait, not
// the command. When ctx ends before the command does, Run returns at once a
// *StillRunningError that wraps ctx.Err() and tells when the command ends;
// the command runs on and is reaped in the background. When ctx has ended
// before Run is called, Run starts nothing and returns an error wrapping
// ctx.Err().
type Runner interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// The tools other than lvm that a Runner runs: args[0] names the tool, the
// rest are its arguments.
const (
	// ToolDMSetup is dmsetup (device-mapper messages to a thin pool).
	ToolDMSetup = "dmsetup"
	// ToolThinDelta is thin_delta of thin-provisioning-tools.
	ToolThinDelta = "thin_delta"
)

// isTool tells whether args run a tool other than lvm.
func isTool(args []string) bool {
	return len(args) > 0 && (args[0] == ToolDMSetup || args[0] == ToolThinDelta)
}

// ExecRunner runs the lvm binary as a child process.
type ExecRunner struct {
	// Path is the lvm binary, "lvm" (looked up in PATH) when empty.
	Path string
	// DMSetupPath and ThinDeltaPath are the binaries of ToolDMSetup and
	// ToolThinDelta, their names (looked up in PATH) when empty.
	DMSetupPath, ThinDeltaPath string
	// Prefix is put before Path, e.g. {"nsenter", "-t", "1", "-m", "--"} to run
	// lvm in the host's mount namespace from a container.
	Prefix []string
	// Config, when set, is lvm configuration given to every command (what
	// --config takes: "section/key=value ...", added in front of a
	// command's own --config). lvmd in a container turns dmeventd
	// monitoring off with it: see docs/lvmd.md.
	Config string
	// OnRun, when set, is called after every command with its subcommand,
	// duration in seconds and error; lvmd counts processes with it. It is
	// called when the process has really ended, also when Run returned
	// earlier because its context ended.
	OnRun func(subcommand string, seconds float64, err error)
}

var _ Runner = (*ExecRunner)(nil)

// Run implements Runner. It does not use exec.CommandContext, which kills
// the process when ctx ends.
func (r *ExecRunner) Run(ctx context.Context, args ...string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		// Nothing runs that its caller no longer waits for.
		return nil, &CommandError{Args: args, ExitCode: -1, err: fmt.Errorf("not started: %w", err)}
	}
	argv := append(append([]string{}, r.Prefix...), r.argv(args)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	// LC_ALL=C: messages that errors are classified by must not be translated.
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LVM_SUPPRESS_FD_WARNINGS=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group: a signal to lvmd's group (Ctrl-C in a
	// terminal) does not reach lvm in the middle of its work.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		r.observe(args, start, err)
		return nil, &CommandError{Args: args, ExitCode: -1, err: err}
	}
	// The process is waited for here, not by the caller, so that it is
	// reaped (and observed) however long it takes; this goroutine lives as
	// long as the process.
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = cmd.Wait()
		r.observe(args, start, err)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		select {
		case <-done: // ended meanwhile: its result is worth more than ctx's error
		default:
			return nil, &StillRunningError{Args: args, Done: done, Err: ctx.Err()}
		}
	}
	// done is closed: err, stdout and stderr are no longer written.
	if err != nil {
		cerr := &CommandError{Args: args, ExitCode: -1, Stderr: strings.TrimSpace(stderr.String()), err: err}
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			cerr.ExitCode = exitErr.ExitCode()
			if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				// Killed by someone else in the middle of its work: what it
				// changed is not known.
				cerr.err = fmt.Errorf("%w (%w)", ErrOutcomeUnknown, err)
			}
		}
		return stdout.Bytes(), cerr
	}
	return stdout.Bytes(), nil
}

// argv is the command line of args, without Prefix.
func (r *ExecRunner) argv(args []string) []string {
	if isTool(args) {
		path := args[0]
		switch {
		case args[0] == ToolDMSetup && r.DMSetupPath != "":
			path = r.DMSetupPath
		case args[0] == ToolThinDelta && r.ThinDeltaPath != "":
			path = r.ThinDeltaPath
		}
		return append([]string{path}, args[1:]...)
	}
	path := r.Path
	if path == "" {
		path = "lvm"
	}
	return append([]string{path}, withConfig(args, r.Config)...)
}

// withConfig gives the lvm command args the configuration cfg: in front of
// the value of its own --config, or as a --config after the subcommand.
func withConfig(args []string, cfg string) []string {
	if cfg == "" || len(args) == 0 {
		return args
	}
	out := slices.Clone(args)
	for i := 1; i+1 < len(out); i++ {
		if out[i] == "--config" {
			out[i+1] = cfg + " " + out[i+1]
			return out
		}
	}
	return append([]string{out[0], "--config", cfg}, out[1:]...)
}

func (r *ExecRunner) observe(args []string, start time.Time, err error) {
	if r.OnRun != nil && len(args) > 0 {
		r.OnRun(args[0], time.Since(start).Seconds(), err)
	}
}

// CommandError is a failed lvm (or ToolDMSetup, ToolThinDelta) command.
type CommandError struct {
	Args     []string
	ExitCode int
	Stderr   string
	err      error
}

func (e *CommandError) Error() string {
	msg := e.Stderr
	if msg == "" && e.err != nil {
		msg = e.err.Error()
	}
	return fmt.Sprintf("%s: exit code %d: %s", commandLine(e.Args), e.ExitCode, msg)
}

// Unwrap returns the underlying exec error.
func (e *CommandError) Unwrap() error { return e.err }

// StillRunningError is what a Runner returns when its context ended before
// the command did: the caller stopped waiting, the command was not stopped
// and may yet change things. Whoever serialises lvm commands must start no
// other one until Done is closed, and must not trust what it knew of the
// state before.
type StillRunningError struct {
	Args []string
	// Done is closed when the command has ended.
	Done <-chan struct{}
	// Err is the context's error that ended the wait.
	Err error
}

func (e *StillRunningError) Error() string {
	return fmt.Sprintf("%s: stopped waiting, the command runs on: %v", commandLine(e.Args), e.Err)
}

// Unwrap returns the context's error.
func (e *StillRunningError) Unwrap() error { return e.Err }

// commandLine is args as a message shows them: "lvm lvcreate ...", or
// "dmsetup message ..." for a tool.
func commandLine(args []string) string {
	if isTool(args) {
		return strings.Join(args, " ")
	}
	return "lvm " + strings.Join(args, " ")
}
