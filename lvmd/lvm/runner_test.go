package lvm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
)

// helperEnv makes the test binary act as lvm (see TestMain), so that
// ExecRunner is tested on a real child process without lvm2 or root.
const helperEnv = "THINLVM_TEST_FAKE_LVM"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperLVM(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// helperLVM is the child process. Its subcommands:
//
//	block DIR: create DIR/started, wait for DIR/go, create DIR/done, print "done"
//	fail:      print an lvm error on stderr and exit 5
//	echo ARG...: print the arguments
//	killed:      die of SIGKILL, as lvm killed by someone else
func helperLVM(args []string) int {
	if len(args) == 0 {
		return fakeShell()
	}
	switch args[0] {
	case "block":
		dir := args[1]
		if err := os.WriteFile(filepath.Join(dir, "started"), nil, 0o600); err != nil {
			return 1
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return 1
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o600); err != nil {
			return 1
		}
		fmt.Print("done")
		return 0
	case "fail":
		fmt.Fprintln(os.Stderr, `  Volume group "vg9" not found`)
		return 5
	case "echo":
		fmt.Print(strings.Join(args[1:], " "))
		return 0
	case "killed":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	}
	return 3
}

// exit is one OnRun call.
type exit struct {
	subcommand string
	err        error
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// A started lvm command is never killed: when the context ends, Run returns
// at once and the process runs to its end, is reaped and observed. With
// exec.CommandContext the process is killed: it never creates DIR/done and
// OnRun sees "signal: killed".
func TestExecRunnerNeverKills(t *testing.T) {
	t.Setenv(helperEnv, "1")
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		// cancel cancels the context once the command has started.
		cancel  bool
		wantErr error
	}{
		{
			name:    "cancelled",
			ctx:     func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			cancel:  true,
			wantErr: context.Canceled,
		},
		{
			name: "deadline passed",
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 200*time.Millisecond)
			},
			wantErr: context.DeadlineExceeded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			exits := make(chan exit, 1)
			r := &lvm.ExecRunner{Path: os.Args[0], OnRun: func(sub string, _ float64, err error) { exits <- exit{sub, err} }}
			ctx, cancel := tt.ctx()
			defer cancel()
			ran := make(chan error, 1)
			go func() {
				_, err := r.Run(ctx, "block", dir)
				ran <- err
			}()
			waitFor(t, "the command to start", func() bool { return exists(filepath.Join(dir, "started")) })
			if tt.cancel {
				cancel()
			}
			var err error
			select {
			case err = <-ran:
			case <-time.After(10 * time.Second):
				t.Fatal("Run still waits for a command whose context ended")
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Run: %v, want an error wrapping %v", err, tt.wantErr)
			}
			if exists(filepath.Join(dir, "done")) {
				t.Fatal("the command ended before it was let go: the test proves nothing")
			}

			// Let the command go on: it must finish, not have been killed.
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			select {
			case e := <-exits:
				if e.subcommand != "block" || e.err != nil {
					t.Errorf("OnRun(%q, %v), want (\"block\", <nil>): the process did not run to its end", e.subcommand, e.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the process was not reaped: OnRun not called")
			}
			if !exists(filepath.Join(dir, "done")) {
				t.Error("the command did not complete its work")
			}
			var still *lvm.StillRunningError
			if !errors.As(err, &still) {
				t.Fatalf("Run: %v, want a *lvm.StillRunningError", err)
			}
			select {
			case <-still.Done:
			case <-time.After(10 * time.Second):
				t.Fatal("Done not closed after the process ended")
			}
		})
	}
}

func TestExecRunner(t *testing.T) {
	t.Setenv(helperEnv, "1")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		args    []string
		wantOut string
		// wantCode is the *lvm.CommandError's exit code; 0 for success.
		wantCode   int
		wantStderr string
		// wantIs, when set, must be in the error's chain.
		wantIs   error
		wantRuns int
	}{
		{name: "success", ctx: context.Background(), args: []string{"echo", "a", "b"}, wantOut: "a b", wantRuns: 1},
		{name: "failure", ctx: context.Background(), args: []string{"fail"}, wantCode: 5, wantStderr: `Volume group "vg9" not found`, wantRuns: 1},
		{name: "context ended before the start", ctx: cancelled, args: []string{"echo", "x"}, wantCode: -1, wantIs: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs := 0
			r := &lvm.ExecRunner{Path: os.Args[0], OnRun: func(string, float64, error) { runs++ }}
			out, err := r.Run(tt.ctx, tt.args...)
			if string(out) != tt.wantOut {
				t.Errorf("output %q, want %q", out, tt.wantOut)
			}
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			} else {
				var cerr *lvm.CommandError
				if !errors.As(err, &cerr) || cerr.ExitCode != tt.wantCode || cerr.Stderr != tt.wantStderr {
					t.Fatalf("Run: %#v, want a *lvm.CommandError with exit code %d and stderr %q", err, tt.wantCode, tt.wantStderr)
				}
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("Run: %v, want an error wrapping %v", err, tt.wantIs)
			}
			if runs != tt.wantRuns {
				t.Errorf("%d processes observed, want %d", runs, tt.wantRuns)
			}
		})
	}
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Config reaches every command: as a --config after the subcommand, or in
// front of the command's own --config value (lvm applies both).
func TestExecRunnerConfig(t *testing.T) {
	t.Setenv(helperEnv, "1")
	r := &lvm.ExecRunner{Path: os.Args[0], Config: "activation/monitoring=0"}
	for args, want := range map[string]string{
		"echo vg0/lv":                           "--config activation/monitoring=0 vg0/lv",
		"echo --use-policies --config a{b=1} x": "--use-policies --config activation/monitoring=0 a{b=1} x",
	} {
		out, err := r.Run(context.Background(), strings.Fields(args)...)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != want {
			t.Errorf("lvm %s ran with %q, want %q", args, out, want)
		}
	}
}

// dmsetup and thin_delta run their own binaries with the arguments after
// the tool's name, and no lvm --config; lvm's path does not serve them.
func TestExecRunnerTools(t *testing.T) {
	t.Setenv(helperEnv, "1")
	var mu sync.Mutex
	var observed []string
	r := &lvm.ExecRunner{Path: "/nonexistent/lvm", DMSetupPath: os.Args[0], ThinDeltaPath: os.Args[0], Config: "activation/monitoring=0",
		OnRun: func(sub string, _ float64, _ error) { mu.Lock(); observed = append(observed, sub); mu.Unlock() }}
	for _, tool := range []string{lvm.ToolDMSetup, lvm.ToolThinDelta} {
		out, err := r.Run(context.Background(), tool, "echo", "vg--a-pool-tpool", "0", "reserve_metadata_snap")
		if err != nil {
			t.Fatal(err)
		}
		if want := "vg--a-pool-tpool 0 reserve_metadata_snap"; string(out) != want {
			t.Errorf("%s ran with %q, want %q", tool, out, want)
		}
	}
	_, err := r.Run(context.Background(), lvm.ToolDMSetup, "fail")
	var cerr *lvm.CommandError
	if !errors.As(err, &cerr) || !strings.HasPrefix(cerr.Error(), "dmsetup fail: exit code 5") {
		t.Errorf("failed dmsetup: %v, want a CommandError naming dmsetup", err)
	}
	waitFor(t, "three observed runs", func() bool { mu.Lock(); defer mu.Unlock(); return len(observed) == 3 })
	if want := []string{"dmsetup", "thin_delta", "dmsetup"}; strings.Join(observed, " ") != strings.Join(want, " ") {
		t.Errorf("observed %q, want %q", observed, want)
	}
}

// An lvm process that someone else killed may have changed anything: its
// outcome is unknown, not a plain failure.
func TestExecRunnerKilled(t *testing.T) {
	t.Setenv(helperEnv, "1")
	r := &lvm.ExecRunner{Path: os.Args[0]}
	_, err := r.Run(context.Background(), "killed")
	if !errors.Is(err, lvm.ErrOutcomeUnknown) {
		t.Errorf("killed lvm: %v, want ErrOutcomeUnknown", err)
	}
	if _, err := r.Run(context.Background(), "fail"); err == nil || errors.Is(err, lvm.ErrOutcomeUnknown) {
		t.Errorf("failed lvm: %v, want a failure of known outcome", err)
	}
}
