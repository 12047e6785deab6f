// Command podrun is the container runtime of the test harness's kubelet:
// it runs one container of a pod from its image's unpacked file system, as
// a runtime would (a mount namespace of its own, the pod's volumes
// bind-mounted with their propagation, /proc, /sys and a minimal /dev,
// chroot, the image's user and env), and restarts it when it exits, as the
// kubelet does with restartPolicy Always. It runs on the host and inside
// the real-LVM VM; it needs root.
//
//	podrun run --root DIR [--mount SRC:DST[:ro,rshared|rslave]]... [--env K=V]...
//	      [--workdir DIR] [--user UID[:GID]] [--private-ipc] [--hostname NAME] [--restart-delay 1s] -- ARGV...
//	podrun exec --hostname NAME -- ARGV...  # ARGV with the pod's hostname, in the host's file system
//	podrun unpack --tar FILE --to DIR     # an image's flattened file system (imageroot.Flatten)
//	podrun share DIR                      # make DIR a shared mount (for Bidirectional volumes)
//	podrun forward --listen :PORT --to SOCKET  # TCP to a unix socket: a test plays the kubelet from the host
//
// SIGTERM stops the container (forwarded to it) and podrun; SIGHUP kills
// the container with SIGKILL, and podrun starts it again, as after a crash.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/thinlvm/thinlvm/internal/imageroot"

	"golang.org/x/sys/unix"
)

// The container's process execs on its main thread. The parent-death
// signal is an attribute of a thread: the supervisor sets it on the main
// thread at the clone, the threads Go starts later have none, and exec
// keeps only the exec'ing thread's. Exec'd from another thread (or, after
// a change of user, with the signal armed again on another thread), a
// container of a killed podrun ran on, orphaned. LockOSThread in init
// keeps main on the main thread.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		runtime.LockOSThread()
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: podrun run|unpack|share ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = supervise(os.Args[2:])
	case "init": // the container's process before exec: see start
		err = initContainer(os.Args[2:])
	case "exec":
		err = execHostname(os.Args[2:])
	case "unpack":
		err = unpack(os.Args[2:])
	case "share":
		err = share(os.Args[2:])
	case "forward":
		err = forward(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "podrun:", err)
		os.Exit(1)
	}
}

// spec is a container to run.
type spec struct {
	root, workdir, user string
	mounts, env         list
	privateIPC          bool
	hostname            string
	restartDelay        time.Duration
	argv                []string
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func parse(args []string) (*spec, error) {
	s := &spec{}
	fs := flag.NewFlagSet("podrun", flag.ContinueOnError)
	fs.StringVar(&s.root, "root", "", "the image's unpacked file system")
	fs.Var(&s.mounts, "mount", "SRC:DST[:OPTS] a volume; OPTS: ro, rshared (Bidirectional), rslave (HostToContainer)")
	fs.Var(&s.env, "env", "K=V in the container's environment")
	fs.StringVar(&s.workdir, "workdir", "/", "the container's working directory")
	fs.StringVar(&s.user, "user", "", "UID[:GID] to run as (the image's user); root when empty")
	fs.BoolVar(&s.privateIPC, "private-ipc", false, "an IPC namespace of its own (a pod without hostIPC)")
	fs.StringVar(&s.hostname, "hostname", "", "the pod's hostname, in a UTS namespace of its own (a pod's replicas must not share one: leader election tells them apart by it)")
	fs.DurationVar(&s.restartDelay, "restart-delay", time.Second, "first delay before a restart, doubled up to 30s; 0 never restarts")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	s.argv = fs.Args()
	if s.root == "" || len(s.argv) == 0 {
		return nil, errors.New("--root and a command are required")
	}
	return s, nil
}

// supervise starts the container and starts it again whenever it exits,
// until podrun is told to stop.
func supervise(args []string) error {
	s, err := parse(args)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	delay := s.restartDelay
	for {
		cmd := exec.Command("/proc/self/exe", append([]string{"init"}, args...)...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
		flags := uintptr(syscall.CLONE_NEWNS)
		if s.privateIPC {
			flags |= syscall.CLONE_NEWIPC
		}
		if s.hostname != "" {
			flags |= syscall.CLONE_NEWUTS
		}
		// Pdeathsig: when podrun is killed, so is its container.
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL}
		started := time.Now()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start the container: %w", err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		stopping := false
	wait:
		for {
			select {
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					_ = cmd.Process.Kill()
					continue
				}
				stopping = true
				_ = cmd.Process.Signal(syscall.SIGTERM)
			case err = <-done:
				break wait
			}
		}
		if stopping || s.restartDelay == 0 {
			return err
		}
		if time.Since(started) > time.Minute {
			delay = s.restartDelay
		}
		fmt.Fprintf(os.Stderr, "podrun: container exited (%v) after %s; restarting in %s\n", err, time.Since(started).Round(time.Millisecond), delay)
		select {
		case sig := <-sigs:
			if sig != syscall.SIGHUP {
				return err
			}
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// initContainer runs in the container's new mount namespace: it makes the
// container's file system and execs its command there.
func initContainer(args []string) error {
	s, err := parse(args)
	if err != nil {
		return err
	}
	root, err := filepath.Abs(s.root)
	if err != nil {
		return err
	}
	// Nothing mounted here may reach the host: the mount that holds the
	// root becomes private (in this namespace only), then the root is a
	// private mount of its own. A volume bound from a shared mount stays
	// in that mount's peer group (Bidirectional).
	if mp, err := mountPointOf(root); err != nil {
		return err
	} else if err := syscall.Mount("", mp, "", syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make %s private: %w", mp, err)
	}
	if err := syscall.Mount(root, root, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind the root: %w", err)
	}
	if err := syscall.Mount("", root, "", syscall.MS_PRIVATE|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("make the root private: %w", err)
	}
	for _, m := range []struct{ src, dst string }{{"/proc", "/proc"}, {"/sys", "/sys"}} {
		if err := bind(root, m.src, m.dst, ""); err != nil {
			return err
		}
	}
	if err := minimalDev(root); err != nil {
		return err
	}
	for _, m := range s.mounts {
		src, rest, ok := strings.Cut(m, ":")
		if !ok {
			return fmt.Errorf("mount %q: want SRC:DST[:OPTS]", m)
		}
		dst, opts, _ := strings.Cut(rest, ":")
		if err := bind(root, src, dst, opts); err != nil {
			return err
		}
	}
	if s.hostname != "" {
		if err := syscall.Sethostname([]byte(s.hostname)); err != nil {
			return fmt.Errorf("hostname %s: %w", s.hostname, err)
		}
	}
	if err := syscall.Chroot(root); err != nil {
		return fmt.Errorf("chroot %s: %w", root, err)
	}
	if err := os.Chdir(s.workdir); err != nil {
		return fmt.Errorf("workdir %s: %w", s.workdir, err)
	}
	env := []string(s.env)
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			os.Setenv("PATH", v)
		}
	}
	path, err := exec.LookPath(s.argv[0])
	if err != nil {
		return fmt.Errorf("the image has no %s: %w", s.argv[0], err)
	}
	if s.user != "" {
		if err := setUser(s.user); err != nil {
			return err
		}
		// A change of user clears the parent-death signal the supervisor
		// set: armed again, or a container of a killed podrun (the harness
		// crashes a pod so) would run on, orphaned.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
			return fmt.Errorf("parent-death signal: %w", err)
		}
		if os.Getppid() == 1 {
			return errors.New("podrun went away while the container started")
		}
	}
	return syscall.Exec(path, s.argv, env)
}

// execHostname runs a command as it is, in the host's file system, with a
// hostname of its own: a UTS namespace unshared by this thread, which exec
// hands to the command.
func execHostname(args []string) error {
	fs := flag.NewFlagSet("podrun exec", flag.ContinueOnError)
	hostname := fs.String("hostname", "", "the pod's hostname")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *hostname == "" || fs.NArg() == 0 {
		return errors.New("--hostname and a command are required")
	}
	path, err := exec.LookPath(fs.Arg(0))
	if err != nil {
		return err
	}
	runtime.LockOSThread() // the namespace is this thread's
	if err := syscall.Unshare(syscall.CLONE_NEWUTS); err != nil {
		return fmt.Errorf("unshare the UTS namespace: %w", err)
	}
	if err := syscall.Sethostname([]byte(*hostname)); err != nil {
		return fmt.Errorf("hostname %s: %w", *hostname, err)
	}
	return syscall.Exec(path, fs.Args(), os.Environ())
}

// bind mounts src at dst inside root, making dst (a directory or a file,
// as src is) when missing. opts: ro, rshared, rslave (default rprivate).
func bind(root, src, dst, opts string) error {
	target, err := imageroot.InRoot(root, dst)
	if err != nil {
		return err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("volume source: %w", err)
	}
	if fi.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else if _, err = os.Stat(target); os.IsNotExist(err) {
		if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
			err = os.WriteFile(target, nil, 0o644)
		}
	}
	if err != nil {
		return fmt.Errorf("mount point %s: %w", dst, err)
	}
	if err := syscall.Mount(src, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", src, dst, err)
	}
	prop := uintptr(syscall.MS_PRIVATE | syscall.MS_REC)
	for o := range strings.SplitSeq(opts, ",") {
		switch o {
		case "", "ro":
		case "rshared":
			prop = 0 // the source's peer group: mounts made here reach the host
		case "rslave":
			prop = syscall.MS_SLAVE | syscall.MS_REC
		default:
			return fmt.Errorf("mount %s: unknown option %q", dst, o)
		}
	}
	if prop != 0 {
		if err := syscall.Mount("", target, "", prop, ""); err != nil {
			return fmt.Errorf("propagation of %s: %w", dst, err)
		}
	}
	if strings.Contains(","+opts+",", ",ro,") {
		if err := syscall.Mount("", target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only %s: %w", dst, err)
		}
	}
	return nil
}

// minimalDev gives the container the /dev a runtime gives an unprivileged
// container: a tmpfs with the host's null, zero, full, random, urandom and
// tty, and /dev/shm. A pod that mounts the host's /dev gets it on top.
func minimalDev(root string) error {
	dev, err := imageroot.InRoot(root, "/dev")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", dev, "tmpfs", syscall.MS_NOSUID, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if err := bind(root, "/dev/"+n, "/dev/"+n, ""); err != nil {
			return err
		}
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o1777); err != nil {
		return err
	}
	return syscall.Mount("shm", shm, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777,size=64m")
}

// mountPointOf is the mount point of the mount that holds path.
func mountPointOf(path string) (string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	best := "/"
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescape(f[4])
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	return best, nil
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// setUser switches to UID[:GID] with no supplementary groups.
func setUser(user string) error {
	u, g, _ := strings.Cut(user, ":")
	uid, err := strconv.Atoi(u)
	if err != nil {
		return fmt.Errorf("user %q: only numeric users are supported", user)
	}
	gid := uid
	if g != "" {
		if gid, err = strconv.Atoi(g); err != nil {
			return fmt.Errorf("user %q: only numeric groups are supported", user)
		}
	}
	if err := syscall.Setgroups(nil); err != nil {
		return err
	}
	if err := syscall.Setgid(gid); err != nil {
		return err
	}
	return syscall.Setuid(uid)
}

// unpack writes an image's flattened file system (a tar) to a directory.
func unpack(args []string) error {
	fs := flag.NewFlagSet("unpack", flag.ContinueOnError)
	tarPath := fs.String("tar", "", "the flattened file system")
	to := fs.String("to", "", "the directory to write it to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := os.Open(*tarPath)
	if err != nil {
		return err
	}
	defer f.Close()
	tmp := *to + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := imageroot.Unpack(f, tmp); err != nil {
		return err
	}
	if err := os.RemoveAll(*to); err != nil {
		return err
	}
	return os.Rename(tmp, *to)
}

// share makes dir a shared mount (binding it onto itself first when it is
// not a mount point), as a kubelet's host has it for the volumes a pod
// mounts Bidirectional.
func share(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: podrun share DIR")
	}
	dir, err := filepath.Abs(args[0])
	if err != nil {
		return err
	}
	mp, err := mountPointOf(dir)
	if err != nil {
		return err
	}
	if mp != dir {
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", dir, err)
		}
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED, ""); err != nil {
		return fmt.Errorf("share %s: %w", dir, err)
	}
	return nil
}

// forward accepts TCP connections and joins each to a new connection to a
// unix socket, until killed: a test on the host reaches the node agent's
// CSI socket in the VM through qemu's port forward, as the kubelet would
// through the socket.
func forward(args []string) error {
	fs := flag.NewFlagSet("forward", flag.ContinueOnError)
	listen := fs.String("listen", "", "TCP address to listen on")
	to := fs.String("to", "", "unix socket to forward to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	for {
		in, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer in.Close()
			out, err := net.Dial("unix", *to)
			if err != nil {
				fmt.Fprintln(os.Stderr, "podrun forward:", err)
				return
			}
			defer out.Close()
			go func() { _, _ = io.Copy(out, in); _ = out.(*net.UnixConn).CloseWrite() }()
			_, _ = io.Copy(in, out)
		}()
	}
}
