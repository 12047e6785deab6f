package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is podrun too: the tests run it with this variable set.
func TestMain(m *testing.M) {
	if os.Getenv("PODRUN_TEST_AS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A SIGKILLed podrun takes its container with it, whichever user the
// container runs as (a change of user clears the parent-death signal,
// which podrun arms again): the harness's Cluster.Crash relies on it. Once
// 3 of 29 kills left a container running, orphaned, when the signal was
// armed on another thread than the exec's.
func TestKilledPodrunTakesItsContainer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("podrun needs root (mount namespaces, chroot)")
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("Debian's busybox-static is needed for the container's sleep: %v", err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "sleep"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"", "65534"} {
		t.Run("user="+user, func(t *testing.T) {
			for i := range 10 {
				marker := fmt.Sprintf("%d%03d", 100000+os.Getpid()%1000, i) // the sleep's argument tells its process apart
				args := []string{"run", "--root", root, "--restart-delay", "0"}
				if user != "" {
					args = append(args, "--user", user)
				}
				cmd := exec.Command(os.Args[0], append(args, "--", "/bin/sleep", marker)...)
				cmd.Env = append(os.Environ(), "PODRUN_TEST_AS_MAIN=1")
				// A file, not a pipe: an orphaned container would hold a
				// pipe open, and Wait with it.
				stderr, err := os.CreateTemp(t.TempDir(), "stderr")
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stderr = stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				pid := waitForProcess(t, marker, stderr.Name())
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				_ = cmd.Wait()
				if !gone(pid, 30*time.Second) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("kill %d: the container (pid %d) outlived podrun", i, pid)
				}
			}
		})
	}
}

// waitForProcess returns the pid of the process whose command line is
// "/bin/sleep marker".
func waitForProcess(t *testing.T, marker, stderr string) int {
	t.Helper()
	for range 500 {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if strings.Join(strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"), " ") == "/bin/sleep "+marker {
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	said, _ := os.ReadFile(stderr)
	t.Fatalf("the container never started; podrun said: %s", said)
	return 0
}

// gone tells whether pid exited (and was reaped: init reaps an orphan)
// within d.
func gone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return true // dead, not yet reaped
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}
