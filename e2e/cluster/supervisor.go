package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Supervisor runs the harness's processes, as an init system would: each
// logs to Dir/logs/NAME.log, a container's is started again when it exits
// (RunContainer), and each is stopped by PID (Kill, Crash, StopAll).
type Supervisor struct {
	// Dir holds logs, certificates, etcd data and sockets.
	Dir string

	log   io.Writer
	mu    sync.Mutex
	procs []*proc
}

type proc struct {
	name string
	env  []string
	argv []string
	// restart: started again when it exits, as the kubelet does with a
	// pod's containers (restartPolicy Always).
	restart bool
	// done is closed when the process has stopped for good; stopping when
	// Kill or Crash asked it to.
	done     chan struct{}
	stopping chan struct{}
	stopOnce sync.Once

	mu  sync.Mutex
	cmd *exec.Cmd // the current run
}

func (p *proc) current() *exec.Cmd {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd
}

func (p *proc) stop() { p.stopOnce.Do(func() { close(p.stopping) }) }

func stop(p *proc) {
	p.stop()
	_ = p.current().Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.current().Process.Kill()
		<-p.done
	}
}

// Restart stops the named process, runs between (nil for nothing), and
// starts it again with the same arguments and environment (and, for a
// container, restarted again when it exits).
func (s *Supervisor) Restart(name string, between func() error) error {
	ps := s.named(name)
	if len(ps) == 0 {
		return fmt.Errorf("no process %s", name)
	}
	last := ps[len(ps)-1]
	s.Kill(name)
	if between != nil {
		if err := between(); err != nil {
			return err
		}
	}
	return s.run(&proc{name: name, env: last.env, argv: last.argv, restart: last.restart})
}

// Args are the arguments the named process was last started with (nil if
// none was).
func (s *Supervisor) Args(name string) []string {
	ps := s.named(name)
	if len(ps) == 0 {
		return nil
	}
	return slices.Clone(ps[len(ps)-1].argv)
}

// Procs are the names of the processes started here.
func (s *Supervisor) Procs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, p := range s.procs {
		if !slices.Contains(out, p.name) {
			out = append(out, p.name)
		}
	}
	return out
}

// Run starts a named process logging to logs/NAME.log.
func (s *Supervisor) Run(name string, env []string, argv ...string) error {
	return s.run(&proc{name: name, env: env, argv: argv})
}

// RunContainer is Run for a pod's container: when it exits it is started
// again after a back-off (1s, doubled up to 30s, back to 1s after a minute
// of running), as the kubelet does, until Kill, Crash or Stop.
func (s *Supervisor) RunContainer(name string, env []string, argv ...string) error {
	return s.run(&proc{name: name, env: env, argv: argv, restart: true})
}

func (s *Supervisor) run(p *proc) error {
	logf, err := os.OpenFile(filepath.Join(s.Dir, "logs", p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.done, p.stopping = make(chan struct{}), make(chan struct{})
	start := func() (<-chan error, error) {
		cmd := exec.Command(p.argv[0], p.argv[1:]...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), p.env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", p.name, err)
		}
		p.mu.Lock()
		p.cmd = cmd
		p.mu.Unlock()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		return exited, nil
	}
	exited, err := start()
	if err != nil {
		logf.Close()
		return err
	}
	go func() {
		defer close(p.done)
		defer logf.Close()
		delay := time.Second
		for {
			started := time.Now()
			err := <-exited
			select {
			case <-p.stopping:
				return
			default:
			}
			if !p.restart {
				return
			}
			if time.Since(started) > time.Minute {
				delay = time.Second
			}
			fmt.Fprintf(logf, "kubelet: %s exited (%v) after %s; restarting in %s\n", p.name, err, time.Since(started).Round(time.Millisecond), delay)
			select {
			case <-p.stopping:
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, 30*time.Second)
			if exited, err = start(); err != nil {
				fmt.Fprintf(logf, "kubelet: %v\n", err)
				return
			}
		}
	}()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return nil
}

// started tells whether a process of that name was started here.
func (s *Supervisor) started(name string) bool { return len(s.named(name)) > 0 }

// Alive tells whether the named process still runs.
func (s *Supervisor) Alive(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.name == name {
			select {
			case <-p.done:
			default:
				return true
			}
		}
	}
	return false
}

// named are the processes of that name started here, oldest first.
func (s *Supervisor) named(name string) []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ps []*proc
	for _, p := range s.procs {
		if p.name == name {
			ps = append(ps, p)
		}
	}
	return ps
}

// Kill stops the named processes (SIGTERM, then SIGKILL) and waits.
func (s *Supervisor) Kill(name string) {
	for _, p := range s.named(name) {
		stop(p)
	}
}

// Crash kills the named processes with SIGKILL, as a node losing power or
// the OOM killer would: no signal handler runs, no lease is released.
// Nothing starts them again; Restart does.
func (s *Supervisor) Crash(name string) {
	for _, p := range s.named(name) {
		p.stop()
		_ = p.current().Process.Kill()
		<-p.done
	}
}

// Log returns the tail of a process's log.
func (s *Supervisor) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "logs", name+".log"))
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// WaitFor polls cond until it is true, it errs, timeout passes, or one of
// the named processes dies (its log tail is in the error).
func (s *Supervisor) WaitFor(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error), procs ...string) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		for _, p := range procs {
			if !s.Alive(p) {
				return fmt.Errorf("%s died while waiting for %s; log:\n%s", p, what, s.Log(p))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// StopAll stops every process, last started first.
func (s *Supervisor) StopAll() {
	s.mu.Lock()
	ps := s.procs
	s.procs = nil
	s.mu.Unlock()
	for i := len(ps) - 1; i >= 0; i-- {
		stop(ps[i])
	}
}
