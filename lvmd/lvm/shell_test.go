package lvm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
)

// fakeShell is the test binary acting as lvm's shell (no arguments): it
// reads one command a line, split as lvm's shell splits it (a word in '...'
// or "..." whole, no escapes), and writes each command's log report as one
// JSON document to LVM_REPORT_FD, with lvm's return codes (1 success, 5
// failure). Like lvm, it refuses to start without its command profile.
// Commands:
//
//	echo ARG...: a report holding the arguments (each in <>)
//	fail:        lvm's "Volume group not found" error, return code 5
//	block DIR:   create DIR/started, wait for DIR/go, create DIR/done
//	die:         exit without a report (the shell crashed mid-command)
//	stray:       a report whose status is another command's
//	pid:         a report holding the shell's pid
//	sysdir:      a report holding lvm.conf's content and the profiles
//	version:     success
func fakeShell() int {
	profile := filepath.Join(os.Getenv("LVM_SYSTEM_DIR"), "profile", os.Getenv("LVM_COMMAND_PROFILE")+".profile")
	if _, err := os.Stat(profile); err != nil || os.Getenv("LVM_COMMAND_PROFILE") == "" {
		fmt.Fprintf(os.Stderr, "  Failed to load profile %s.\n", profile)
		return 5
	}
	if os.Getenv("LVM_REPORT_FD") != "3" {
		return 5
	}
	rep := os.NewFile(3, "report")
	type entry map[string]string
	emit := func(cmd string, ret int, report any, entries ...entry) {
		status := "success"
		if ret != 1 {
			status = "failure"
		}
		log := append(entries, entry{"log_type": "status", "log_context": "shell", "log_object_type": "cmd",
			"log_object_name": cmd, "log_message": status, "log_ret_code": fmt.Sprint(ret)})
		doc := map[string]any{"log": log}
		if report != nil {
			doc["report"] = report
		}
		b, _ := json.MarshalIndent(doc, "  ", "    ")
		rep.Write(append(b, '\n'))
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		words := splitLikeLVM(in.Text())
		if len(words) == 0 {
			continue
		}
		cmd, args := words[0], words[1:]
		switch cmd {
		case "echo":
			var quoted []string
			for _, a := range args {
				quoted = append(quoted, "<"+a+">")
			}
			emit(cmd, 1, []map[string]any{{"args": strings.Join(quoted, " ")}})
		case "fail":
			emit(cmd, 5, nil, entry{"log_type": "error", "log_context": "processing", "log_object_type": "vg",
				"log_object_name": "vg9", "log_message": `Volume group "vg9" not found`, "log_ret_code": "0"})
		case "block":
			dir := args[0]
			os.WriteFile(filepath.Join(dir, "started"), nil, 0o600)
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
				if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
					break
				}
				if time.Now().After(deadline) {
					return 1
				}
			}
			os.WriteFile(filepath.Join(dir, "done"), nil, 0o600)
			emit(cmd, 1, nil)
		case "die":
			fmt.Fprintln(os.Stderr, "  Internal error: fake crash.")
			return 139
		case "stray":
			emit("lvs", 1, nil)
		case "pid":
			emit(cmd, 1, []map[string]any{{"pid": fmt.Sprint(os.Getpid())}})
		case "sysdir":
			conf, _ := os.ReadFile(filepath.Join(os.Getenv("LVM_SYSTEM_DIR"), "lvm.conf"))
			profiles, _ := filepath.Glob(filepath.Join(os.Getenv("LVM_SYSTEM_DIR"), "profile", "*"))
			for i, p := range profiles {
				profiles[i] = filepath.Base(p)
			}
			emit(cmd, 1, []map[string]any{{"conf": string(conf), "profiles": strings.Join(profiles, ",")}})
		case "version":
			emit(cmd, 1, nil)
		default:
			emit(cmd, 2, nil, entry{"log_type": "error", "log_context": "shell", "log_object_type": "cmd",
				"log_object_name": cmd, "log_message": fmt.Sprintf("No such command '%s'.", cmd), "log_ret_code": "0"})
		}
	}
	emit("", 1, nil) // lvm's last, empty report at end of input
	return 0
}

// splitLikeLVM splits a line as lvm's shell does.
func splitLikeLVM(line string) []string {
	var words []string
	for i := 0; i < len(line); {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		if i == len(line) {
			break
		}
		if q := line[i]; q == '\'' || q == '"' {
			j := strings.IndexByte(line[i+1:], q)
			if j < 0 {
				j = len(line) - i - 1
			}
			words = append(words, line[i+1:i+1+j])
			i += j + 2
			continue
		}
		j := strings.IndexByte(line[i:], ' ')
		if j < 0 {
			j = len(line) - i
		}
		words = append(words, line[i:i+j])
		i += j
	}
	return words
}

// shellRunner is a ShellRunner on the fake shell, with an lvm system dir of
// its own, counting shell starts.
func shellRunner(t *testing.T) (*lvm.ShellRunner, *atomic.Int32) {
	t.Helper()
	t.Setenv(helperEnv, "1")
	sys := t.TempDir()
	if err := os.WriteFile(filepath.Join(sys, "lvm.conf"), []byte("global { use_lvmlockd = 0 }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(sys, "profile"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sys, "profile", "host.profile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var starts atomic.Int32
	r := &lvm.ShellRunner{Path: os.Args[0], SystemDir: sys, WorkDir: t.TempDir(),
		Exec:    &lvm.ExecRunner{Path: os.Args[0]},
		OnStart: func() { starts.Add(1) }, Log: testr.New(t)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return r, &starts
}

// report is the "report" of a command's document.
func report(t *testing.T, out []byte) map[string]string {
	t.Helper()
	var d struct {
		Report []map[string]string `json:"report"`
	}
	if err := json.Unmarshal(out, &d); err != nil || len(d.Report) != 1 {
		t.Fatalf("output %q: want one report row (%v)", out, err)
	}
	return d.Report[0]
}

// Arguments reach the shell whole, whatever spaces and quotes they hold,
// and the command's report comes back as its output; a failure is a
// CommandError with lvm's exit code and message, as ExecRunner gives.
func TestShellRunnerArgsAndResults(t *testing.T) {
	r, starts := shellRunner(t)
	ctx := context.Background()
	out, err := r.Run(ctx, "echo", "a b", "it's", `say "x"`, "", "--config", "activation/monitoring=0 global/units=b")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := report(t, out)["args"], `<a b> <it's> <say "x"> <> <--config> <activation/monitoring=0 global/units=b>`; got != want {
		t.Errorf("args in the shell = %s, want %s", got, want)
	}
	_, err = r.Run(ctx, "fail")
	var cerr *lvm.CommandError
	if !errors.As(err, &cerr) || cerr.ExitCode != 5 || cerr.Stderr != `Volume group "vg9" not found` {
		t.Fatalf("fail: %#v, want a CommandError with exit code 5 and lvm's message", err)
	}
	if errors.Is(err, lvm.ErrOutcomeUnknown) {
		t.Errorf("a failure lvm reported is not of unknown outcome: %v", err)
	}
	_, err = r.Run(ctx, "nosuch")
	if !errors.As(err, &cerr) || cerr.ExitCode != 2 || !strings.Contains(cerr.Stderr, "No such command") {
		t.Fatalf("unknown command: %v, want exit code 2", err)
	}
	if n := starts.Load(); n != 1 {
		t.Errorf("%d shells started for three commands, want 1", n)
	}
}

// The shell runs in a system dir of its own: the real lvm.conf and profiles
// are there (symlinked), and so is the shell's profile.
func TestShellRunnerSystemDir(t *testing.T) {
	r, _ := shellRunner(t)
	out, err := r.Run(context.Background(), "sysdir")
	if err != nil {
		t.Fatal(err)
	}
	row := report(t, out)
	if row["conf"] != "global { use_lvmlockd = 0 }\n" {
		t.Errorf("lvm.conf in the shell's system dir = %q, want the real one", row["conf"])
	}
	if row["profiles"] != "host.profile,"+lvm.ShellProfile+".profile" {
		t.Errorf("profiles = %q, want the real one and the shell's", row["profiles"])
	}
}

// A shell that dies in the middle of a command leaves its outcome unknown;
// the next command runs in a new shell.
func TestShellRunnerDeath(t *testing.T) {
	r, starts := shellRunner(t)
	ctx := context.Background()
	first, err := r.Run(ctx, "pid")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Run(ctx, "die")
	if !errors.Is(err, lvm.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "fake crash") {
		t.Fatalf("die: %v, want ErrOutcomeUnknown with the shell's stderr", err)
	}
	second, err := r.Run(ctx, "pid")
	if err != nil {
		t.Fatal(err)
	}
	if report(t, first)["pid"] == report(t, second)["pid"] {
		t.Errorf("the command after the death ran in the dead shell (pid %s)", report(t, first)["pid"])
	}
	if n := starts.Load(); n != 2 {
		t.Errorf("%d shells started, want 2", n)
	}
}

// A report that is not the command's own status means the runner lost
// track of the shell: the outcome is unknown, and a new shell takes the
// next command.
func TestShellRunnerStrayReport(t *testing.T) {
	r, starts := shellRunner(t)
	ctx := context.Background()
	if _, err := r.Run(ctx, "stray"); !errors.Is(err, lvm.ErrOutcomeUnknown) {
		t.Fatalf("stray: %v, want ErrOutcomeUnknown", err)
	}
	if _, err := r.Run(ctx, "version"); err != nil {
		t.Fatal(err)
	}
	if n := starts.Load(); n != 2 {
		t.Errorf("%d shells started, want 2", n)
	}
}

// After MaxCommands the shell is replaced between two commands.
func TestShellRunnerMaxCommands(t *testing.T) {
	r, starts := shellRunner(t)
	r.MaxCommands = 3
	ctx := context.Background()
	var pids []string
	for range 7 {
		out, err := r.Run(ctx, "pid")
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, report(t, out)["pid"])
	}
	if pids[0] != pids[2] || pids[2] == pids[3] || pids[3] != pids[5] || pids[5] == pids[6] {
		t.Errorf("shell pids %v, want a new shell every 3 commands", pids)
	}
	if n := starts.Load(); n != 3 {
		t.Errorf("%d shells started, want 3", n)
	}
}

// A command is never killed: when the caller stops waiting, Run returns a
// StillRunningError, the command runs to its end in the shell, and the next
// command waits for it.
func TestShellRunnerNeverKills(t *testing.T) {
	r, _ := shellRunner(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.Run(ctx, "block", dir)
		errc <- err
	}()
	started := filepath.Join(dir, "started")
	waitFor(t, started, func() bool { return exists(started) })
	cancel()
	err := <-errc
	var still *lvm.StillRunningError
	if !errors.As(err, &still) {
		t.Fatalf("Run after cancel: %v, want StillRunningError", err)
	}
	next := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), "version")
		next <- err
	}()
	select {
	case err := <-next:
		t.Fatalf("a command ran beside the one still running: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	<-still.Done
	if !exists(filepath.Join(dir, "done")) {
		t.Error("the command was stopped: no done file")
	}
	if err := <-next; err != nil {
		t.Errorf("the next command: %v", err)
	}
	// A context that ended before Run starts nothing.
	if _, err := r.Run(ctx, "die"); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with an ended context: %v, want context.Canceled", err)
	}
	if _, err := r.Run(context.Background(), "version"); err != nil {
		t.Errorf("the shell after a command that never started: %v", err)
	}
}

// Tools and arguments the shell's line cannot carry run as processes of
// their own.
func TestShellRunnerFallsBackToExec(t *testing.T) {
	r, starts := shellRunner(t)
	out, err := r.Run(context.Background(), "echo", `a\b`)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `a\b` {
		t.Errorf("output %q: want the process's own output", out)
	}
	out, err = r.Run(context.Background(), "echo", `it's "x"`)
	if err != nil || string(out) != `it's "x"` {
		t.Errorf("an argument with both quotes: %q, %v", out, err)
	}
	long := append([]string{"echo"}, strings.Split(strings.Repeat("v ", 70), " ")...)
	if _, err := r.Run(context.Background(), long...); err != nil {
		t.Error(err)
	}
	if n := starts.Load(); n != 0 {
		t.Errorf("%d shells started for commands it cannot take", n)
	}
}

// A shell that cannot start (here: no lvm at the path) fails Start.
func TestShellRunnerStartFails(t *testing.T) {
	r, _ := shellRunner(t)
	r.Path = filepath.Join(t.TempDir(), "lvm")
	if err := r.Start(context.Background()); err == nil {
		t.Fatal("Start with no lvm: no error")
	}
	r.Path = os.Args[0]
	r.SystemDir = filepath.Join(t.TempDir(), "missing")
	if err := r.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "system dir") {
		t.Fatalf("Start with no lvm system dir: %v", err)
	}
}
