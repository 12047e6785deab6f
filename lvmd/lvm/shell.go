package lvm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// ErrOutcomeUnknown: the lvm shell ended while it ran the command, so
// whether the command changed anything is not known. The caller re-reads
// the report before it decides anything, and may retry.
var ErrOutcomeUnknown = errors.New("outcome unknown: the lvm shell ended during the command")

// ShellProfile is the name of the lvm command profile the shell runs with
// (ShellRunner writes it into the shell's own system dir).
const ShellProfile = "thinlvm-shell"

// shellProfileText turns on lvm's log report in JSON, which is how the
// shell hands back each command's result: one JSON document per command on
// LVM_REPORT_FD, its last entry the command's status and return code. The
// per-object "processing" statuses are left out (a fullreport would carry
// one per PV, LV and VG).
const shellProfileText = `# Written by thinlvm's lvmd for its lvm shell; not used by other commands.
report {
	output_format = "json"
}
log {
	report_command_log = 1
	command_log_selection = "!(log_type=status && log_context=processing)"
}
`

// maxShellArgs bounds a command's arguments in the shell: lvm's shell
// splits a line into at most 64 words and reports nothing at all for a
// longer one. A longer command runs as a process of its own.
const maxShellArgs = 60

// DefaultShellMaxCommands is how many commands one lvm shell runs before
// ShellRunner replaces it (between two commands), bounding the memory that
// a long-lived lvm process may gather.
const DefaultShellMaxCommands = 500

// ShellRunner runs lvm commands in one long-lived `lvm` shell process
// instead of one process each: most of an lvm command's time is process
// start, library load and configuration, not the metadata change. It is
// what lvm2's own D-Bus service does.
//
// Each command is written to the shell's stdin as one line; its result comes
// back on a pipe of its own (LVM_REPORT_FD) as one JSON document, lvm's log
// report: the command's messages, errors and, last, its status with lvm's
// return code (and, for a report command, the report itself). Nothing is
// read from the prompt or stdout. The shell runs with a command profile
// (ShellProfile) in a system dir of its own that mirrors the real one
// entry by entry (lvm.conf, lvmlocal.conf, devices/, backup/, archive/ are
// symlinks to it), so the host's configuration still governs every command
// and nothing is written into the host's /etc/lvm.
//
// Like ExecRunner, ShellRunner never kills a command: a Run whose context
// ends returns a *StillRunningError and the command runs to its end in the
// shell, which takes no other command meanwhile. When the shell dies in the
// middle of a command, Run returns an error wrapping ErrOutcomeUnknown and
// the next command starts a new shell. A command the shell cannot take (a
// tool, too many arguments, an argument its line splitter cannot quote) runs
// through Exec.
type ShellRunner struct {
	// Path is the lvm binary, "lvm" (looked up in PATH) when empty.
	Path string
	// Config is lvm configuration given to every command, as
	// ExecRunner.Config.
	Config string
	// SystemDir is lvm's system dir that the shell's own mirrors: empty for
	// $LVM_SYSTEM_DIR, or /etc/lvm.
	SystemDir string
	// WorkDir holds the shell's system dir: empty for os.TempDir().
	WorkDir string
	// MaxCommands is how many commands one shell runs before it is
	// replaced; 0 for DefaultShellMaxCommands.
	MaxCommands int
	// Exec runs the tools (ToolDMSetup, ToolThinDelta) and any command the
	// shell cannot take.
	Exec *ExecRunner
	// OnRun is called after every command the shell ran, as
	// ExecRunner.OnRun.
	OnRun func(subcommand string, seconds float64, err error)
	// OnStart is called every time a shell process starts.
	OnStart func()
	// Log receives the shell's starts, ends and stderr.
	Log logr.Logger

	// sem is held from the start of a command until the shell has answered
	// it, also when Run returned earlier: one command at a time.
	sem  chan struct{}
	once sync.Once
	// sh is the current shell, guarded by sem.
	sh *shell
}

var _ Runner = (*ShellRunner)(nil)

func (r *ShellRunner) init() {
	r.once.Do(func() { r.sem = make(chan struct{}, 1) })
}

// Start starts the shell and has it run `lvm version`, so that a shell that
// cannot work (no lvm, a profile lvm cannot find) fails at once, not at the
// first volume.
func (r *ShellRunner) Start(ctx context.Context) error {
	_, err := r.Run(ctx, "version")
	if err != nil {
		return fmt.Errorf("start the lvm shell: %w", err)
	}
	return nil
}

// Close ends the shell between two commands (it reads end of input and
// exits). It waits for a command the shell still runs, up to ctx.
func (r *ShellRunner) Close(ctx context.Context) error {
	r.init()
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("close the lvm shell: a command still runs: %w", ctx.Err())
	}
	defer func() { <-r.sem }()
	if r.sh == nil {
		return nil
	}
	sh := r.sh
	r.sh = nil
	sh.retire(r.Log)
	select {
	case <-sh.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close the lvm shell: it has not exited: %w", ctx.Err())
	}
}

// Run implements Runner.
func (r *ShellRunner) Run(ctx context.Context, args ...string) ([]byte, error) {
	if len(args) == 0 || isTool(args) || !shellable(args) {
		return r.Exec.Run(ctx, args...)
	}
	r.init()
	if err := ctx.Err(); err != nil {
		return nil, &CommandError{Args: args, ExitCode: -1, err: fmt.Errorf("not started: %w", err)}
	}
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, &CommandError{Args: args, ExitCode: -1, err: fmt.Errorf("not started: waiting for the lvm shell: %w", ctx.Err())}
	}
	line := shellLine(withConfig(args, r.Config))
	start := time.Now()
	sh, err := r.send(line)
	if err != nil {
		<-r.sem
		r.observe(args, start, err)
		return nil, &CommandError{Args: args, ExitCode: -1, err: err}
	}
	// The answer is awaited here, not by the caller, so that the shell is
	// held (and the command observed) however long it takes.
	done := make(chan struct{})
	var out []byte
	go func() {
		defer close(done)
		var doc []byte
		doc, err = sh.next()
		if err == nil {
			out, err = result(args, doc)
		}
		if errors.Is(err, ErrOutcomeUnknown) {
			sh.retire(r.Log)
		}
		r.observe(args, start, err)
		<-r.sem
	}()
	select {
	case <-done:
	case <-ctx.Done():
		select {
		case <-done:
		default:
			return nil, &StillRunningError{Args: args, Done: done, Err: ctx.Err()}
		}
	}
	return out, err
}

// send writes line to a live shell, starting one when there is none, the
// current one has died or has run its share of commands. A shell found
// dead when written to had not taken the line, so it is written once more
// to a new one. Called with sem held.
func (r *ShellRunner) send(line string) (*shell, error) {
	limit := r.MaxCommands
	if limit <= 0 {
		limit = DefaultShellMaxCommands
	}
	for attempt := 0; ; attempt++ {
		if r.sh != nil && (r.sh.retired || r.sh.dead() || r.sh.commands >= limit) {
			r.sh.retire(r.Log)
			r.sh = nil
		}
		if r.sh == nil {
			sh, err := r.startShell()
			if err != nil {
				return nil, err
			}
			r.sh = sh
		}
		err := r.sh.write(line)
		if err == nil {
			return r.sh, nil
		}
		r.sh.retire(r.Log)
		r.sh = nil
		if attempt > 0 {
			return nil, fmt.Errorf("not started: write to the lvm shell: %w", err)
		}
	}
}

func (r *ShellRunner) observe(args []string, start time.Time, err error) {
	if r.OnRun != nil {
		r.OnRun(args[0], time.Since(start).Seconds(), err)
	}
}

// shell is one lvm shell process.
type shell struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// docs are the JSON documents read from the report pipe, closed at its
	// end (readErr tells why).
	docs     chan []byte
	readErr  error // set before docs closes
	exited   chan struct{}
	waitErr  error // set before exited closes
	stderr   *stderrLog
	commands int
	retired  bool
}

// startShell starts an lvm shell in a fresh system dir of its own.
func (r *ShellRunner) startShell() (*shell, error) {
	dir, err := r.makeSystemDir()
	if err != nil {
		return nil, fmt.Errorf("not started: make the lvm shell's system dir: %w", err)
	}
	path := r.Path
	if path == "" {
		path = "lvm"
	}
	rep, repw, err := os.Pipe()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("not started: %w", err)
	}
	cmd := exec.Command(path)
	// The report pipe is the child's fd 3 (its first ExtraFiles entry).
	cmd.ExtraFiles = []*os.File{repw}
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LVM_SUPPRESS_FD_WARNINGS=1", "TERM=dumb",
		"LVM_SYSTEM_DIR="+dir, "LVM_COMMAND_PROFILE="+ShellProfile, "LVM_REPORT_FD=3")
	// Its own process group, as ExecRunner's commands: a signal to lvmd's
	// group does not reach lvm in the middle of its work. No parent-death
	// signal either: when lvmd dies the shell reads end of input after its
	// command and exits by itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sh := &shell{cmd: cmd, docs: make(chan []byte, 8), exited: make(chan struct{}), stderr: &stderrLog{max: 4096, log: r.Log}}
	cmd.Stdout = io.Discard // the shell's prompt; results come on the report pipe
	cmd.Stderr = sh.stderr
	stdin, err := cmd.StdinPipe()
	if err == nil {
		sh.stdin = stdin
		err = cmd.Start()
	}
	repw.Close() // the child holds its end: the pipe ends when the shell does
	if err != nil {
		rep.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("not started: start %s: %w", path, err)
	}
	go sh.readReports(rep, r.Log)
	go func() {
		sh.waitErr = cmd.Wait()
		_ = os.RemoveAll(dir)
		r.Log.V(2).Info("lvm shell ended", "pid", cmd.Process.Pid, "result", fmt.Sprint(sh.waitErr))
		close(sh.exited)
	}()
	if r.OnStart != nil {
		r.OnStart()
	}
	r.Log.V(2).Info("lvm shell started", "pid", cmd.Process.Pid, "systemDir", dir)
	return sh, nil
}

// readReports reads the report pipe into docs until it ends or cannot be
// read (then nothing after it can be trusted to belong to a command).
func (sh *shell) readReports(rep *os.File, log logr.Logger) {
	defer rep.Close()
	dec := json.NewDecoder(rep)
	for {
		var doc json.RawMessage
		if err := dec.Decode(&doc); err != nil {
			sh.readErr = err
			close(sh.docs)
			return
		}
		select {
		case sh.docs <- doc:
		default: // never while one command at a time is written
			log.Info("lvm shell report dropped: nobody waits for it", "report", string(doc))
		}
	}
}

// makeSystemDir makes the shell's system dir: a symlink to every entry of
// the real one but profile/, and a profile/ with a symlink to every real
// profile and ShellProfile.
func (r *ShellRunner) makeSystemDir() (string, error) {
	sys := r.SystemDir
	if sys == "" {
		sys = os.Getenv("LVM_SYSTEM_DIR")
	}
	if sys == "" {
		sys = "/etc/lvm"
	}
	dir, err := os.MkdirTemp(r.WorkDir, "thinlvm-lvm-shell-")
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		_ = os.RemoveAll(dir)
		return "", err
	}
	entries, err := os.ReadDir(sys)
	if err != nil {
		return fail(fmt.Errorf("read lvm's system dir: %w", err))
	}
	for _, e := range entries {
		if e.Name() == "profile" {
			continue
		}
		if err := os.Symlink(filepath.Join(sys, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return fail(err)
		}
	}
	profiles := filepath.Join(dir, "profile")
	if err := os.Mkdir(profiles, 0o755); err != nil {
		return fail(err)
	}
	real, err := os.ReadDir(filepath.Join(sys, "profile"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(fmt.Errorf("read lvm's profiles: %w", err))
	}
	for _, e := range real {
		if e.Name() == ShellProfile+".profile" {
			continue
		}
		if err := os.Symlink(filepath.Join(sys, "profile", e.Name()), filepath.Join(profiles, e.Name())); err != nil {
			return fail(err)
		}
	}
	if err := os.WriteFile(filepath.Join(profiles, ShellProfile+".profile"), []byte(shellProfileText), 0o644); err != nil {
		return fail(err)
	}
	return dir, nil
}

func (sh *shell) dead() bool {
	select {
	case <-sh.exited:
		return true
	default:
		return false
	}
}

// write sends one command line.
func (sh *shell) write(line string) error {
	if sh.dead() {
		return fmt.Errorf("the lvm shell has ended (%w)", sh.waitErr)
	}
	if _, err := io.WriteString(sh.stdin, line+"\n"); err != nil {
		return err
	}
	sh.commands++
	return nil
}

// next returns the JSON document of the command last written. An error
// wraps ErrOutcomeUnknown: the shell ended, or what it wrote cannot be read.
func (sh *shell) next() ([]byte, error) {
	select {
	case doc, ok := <-sh.docs:
		if ok {
			return doc, nil
		}
	case <-sh.exited:
		// What the shell wrote before it ended may still be in the pipe; a
		// child of lvm that holds the pipe open must not hold the answer.
		select {
		case doc, ok := <-sh.docs:
			if ok {
				return doc, nil
			}
		case <-time.After(2 * time.Second):
		}
	}
	select {
	case <-sh.exited:
		return nil, fmt.Errorf("%w (%w; stderr: %s)", ErrOutcomeUnknown, sh.waitErr, strings.TrimSpace(sh.stderr.String()))
	case <-time.After(2 * time.Second):
		return nil, fmt.Errorf("%w: read its report: %w", ErrOutcomeUnknown, sh.readErr)
	}
}

// retire ends the shell between commands: end of input makes lvm exit
// once its current command (if any) is done. It is never killed.
func (sh *shell) retire(log logr.Logger) {
	if sh.retired {
		return
	}
	sh.retired = true
	if err := sh.stdin.Close(); err != nil {
		log.V(2).Info("close the lvm shell's input", "error", err)
	}
}

// shellLine is args as one line of lvm's shell, each argument quoted
// whole (the shell's splitter takes '...' or "..." as one word, with no
// escapes).
func shellLine(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		q := byte('\'')
		if strings.ContainsRune(a, '\'') {
			q = '"'
		}
		b.WriteByte(q)
		b.WriteString(a)
		b.WriteByte(q)
	}
	return b.String()
}

// shellable tells whether the shell can take args as they are: few enough
// words, and each one quotable (not both quote kinds) on one line. A
// backslash is refused too: lvm copies arguments into its JSON log report
// without escaping them.
func shellable(args []string) bool {
	if len(args) > maxShellArgs {
		return false
	}
	for _, a := range args {
		if strings.ContainsAny(a, "\n\r\x00\\") || strings.ContainsRune(a, '\'') && strings.ContainsRune(a, '"') {
			return false
		}
	}
	return true
}

// logEntry is one row of lvm's log report.
type logEntry struct {
	Type       string `json:"log_type"`
	Context    string `json:"log_context"`
	ObjectType string `json:"log_object_type"`
	ObjectName string `json:"log_object_name"`
	Message    string `json:"log_message"`
	RetCode    string `json:"log_ret_code"`
}

// result turns a command's JSON document into what ExecRunner would have
// returned: the document itself as output (a report command's report is in
// it, as --reportformat json prints it), and for a failure a *CommandError
// with lvm's exit code and its error and warning messages as Stderr, one per
// line, as lvm prints them. A document that does not end with this
// command's status is an error wrapping ErrOutcomeUnknown.
func result(args []string, doc []byte) ([]byte, error) {
	var d struct {
		Log []logEntry `json:"log"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, &CommandError{Args: args, ExitCode: -1, err: fmt.Errorf("%w: parse its log report: %w", ErrOutcomeUnknown, err)}
	}
	if len(d.Log) == 0 {
		return nil, &CommandError{Args: args, ExitCode: -1, err: fmt.Errorf("%w: its log report is empty", ErrOutcomeUnknown)}
	}
	last := d.Log[len(d.Log)-1]
	if last.Type != "status" || last.Context != "shell" || last.ObjectType != "cmd" || last.ObjectName != args[0] {
		return nil, &CommandError{Args: args, ExitCode: -1, err: fmt.Errorf("%w: its log report ends with %s %s %q, not the status of %s",
			ErrOutcomeUnknown, last.Context, last.Type, last.ObjectName, args[0])}
	}
	ret, err := strconv.Atoi(last.RetCode)
	if err != nil {
		return nil, &CommandError{Args: args, ExitCode: -1, err: fmt.Errorf("%w: return code %q", ErrOutcomeUnknown, last.RetCode)}
	}
	// lvm's ECMD_PROCESSED (1) is exit code 0; the others are their own.
	if ret == 1 {
		return doc, nil
	}
	var msgs strings.Builder
	for _, e := range d.Log {
		if e.Type == "error" || e.Type == "warn" {
			msgs.WriteString("  " + e.Message + "\n")
		}
	}
	stderr := strings.TrimSpace(msgs.String())
	return doc, &CommandError{Args: args, ExitCode: ret, Stderr: stderr, err: fmt.Errorf("lvm shell: return code %d", ret)}
}

// stderrLog is the shell's stderr: each line logged, the last max bytes
// kept for the error of a shell that died.
type stderrLog struct {
	mu      sync.Mutex
	max     int
	log     logr.Logger
	partial []byte
	tail    bytes.Buffer
}

func (s *stderrLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		line := string(s.partial[:i])
		s.partial = s.partial[i+1:]
		// editline on a pipe says so on every start.
		if line == "Cannot read termcap database;" || line == "using dumb terminal settings." {
			continue
		}
		s.log.V(2).Info("lvm shell stderr", "line", line)
		s.tail.WriteString(line + "\n")
		if over := s.tail.Len() - s.max; over > 0 {
			s.tail.Next(over)
		}
	}
	return len(p), nil
}

func (s *stderrLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tail.String()
}
