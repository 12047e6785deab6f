package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestKrewInstall builds this machine's platform's archive twice (the same
// bytes both times) and checks the manifest with krew's own validator (its
// -skip-install: the validator's install step runs `kubectl krew`, which
// krew does directly here). Then it installs the plugin with krew as a user
// would from a release, offline: --archive stands for the download, and
// KREW_NO_UPGRADE_CHECK keeps krew from asking GitHub for its own latest
// version. Last it runs what krew installed. KREW_TOOLS is the directory
// `make test-images` builds krew and validate-krew-manifest into
// (sigs.k8s.io/krew).
func TestKrewInstall(t *testing.T) {
	tools := os.Getenv("KREW_TOOLS")
	if tools == "" {
		t.Fatal("KREW_TOOLS is not set: make test-images builds krew and validate-krew-manifest and sets it")
	}
	platform := runtime.GOOS + "/" + runtime.GOARCH
	archive := "kubectl-thinlvm_" + runtime.GOOS + "_" + runtime.GOARCH + ".tar.gz"
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		if err := release("v0.1.0", dir, "https://github.com/thinlvm/thinlvm/releases/download", []string{platform}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{archive, "thinlvm.yaml"} {
		x, errA := os.ReadFile(filepath.Join(a, name))
		y, errB := os.ReadFile(filepath.Join(b, name))
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two builds of the same tree", name)
		}
	}
	manifest := filepath.Join(a, "thinlvm.yaml")
	if out, err := exec.Command(filepath.Join(tools, "validate-krew-manifest"), "-manifest", manifest, "-skip-install").CombinedOutput(); err != nil {
		t.Fatalf("validate-krew-manifest: %v\n%s", err, out)
	}
	root := t.TempDir()
	install := exec.Command(filepath.Join(tools, "krew"), "install", "--manifest="+manifest, "--archive="+filepath.Join(a, archive))
	install.Env = append(os.Environ(), "KREW_ROOT="+root, "KREW_NO_UPGRADE_CHECK=1", "HOME="+t.TempDir())
	install.Stdin = strings.NewReader("")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("krew install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(root, "bin", "kubectl-thinlvm"), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("the plugin krew installed: %v\n%s", err, out)
	}
	for _, cmd := range []string{"nodes", "volumes", "images", "move", "evacuate"} {
		if !strings.Contains(string(out), "\n  "+cmd+" ") {
			t.Errorf("kubectl-thinlvm --help lists no %s:\n%s", cmd, out)
		}
	}
}
