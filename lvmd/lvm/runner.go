package lvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Runner runs one lvm command (lvm's first argument is the subcommand, e.g.
// "lvcreate") and returns its standard output. A failed command returns a
// *CommandError.
type Runner interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// ExecRunner runs the lvm binary as a child process.
type ExecRunner struct {
	// Path is the lvm binary, "lvm" (looked up in PATH) when empty.
	Path string
	// Prefix is put before Path, e.g. {"nsenter", "-t", "1", "-m", "--"} to run
	// lvm in the host's mount namespace from a container.
	Prefix []string
	// OnRun, when set, is called after every command with its subcommand,
	// duration in seconds and error; lvmd counts processes with it.
	OnRun func(subcommand string, seconds float64, err error)
}

var _ Runner = (*ExecRunner)(nil)

// Run implements Runner.
func (r *ExecRunner) Run(ctx context.Context, args ...string) ([]byte, error) {
	path := r.Path
	if path == "" {
		path = "lvm"
	}
	argv := append(append(append([]string{}, r.Prefix...), path), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// LC_ALL=C: messages that errors are classified by must not be translated.
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LVM_SUPPRESS_FD_WARNINGS=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if r.OnRun != nil && len(args) > 0 {
		r.OnRun(args[0], time.Since(start).Seconds(), err)
	}
	if err != nil {
		cerr := &CommandError{Args: args, ExitCode: -1, Stderr: strings.TrimSpace(stderr.String()), err: err}
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			cerr.ExitCode = exitErr.ExitCode()
		}
		if ctx.Err() != nil {
			cerr.err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return stdout.Bytes(), cerr
	}
	return stdout.Bytes(), nil
}

// CommandError is a failed lvm command.
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
	return fmt.Sprintf("lvm %s: exit code %d: %s", strings.Join(e.Args, " "), e.ExitCode, msg)
}

// Unwrap returns the underlying exec error.
func (e *CommandError) Unwrap() error { return e.err }
