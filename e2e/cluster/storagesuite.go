package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kubernetes' storage end-to-end suite (e2e/conformance): e2e.test with
// thinlvm's test driver (e2e/conformance/driver.yaml) against this cluster,
// its test pods on the real node.

// The suite's test images, named as KUBE_TEST_REPO_LIST
// (storageSuiteRepoList) makes k8s.io/kubernetes/test/utils/image name them
// at the tested version (its manifest.go): the real node imports them at
// boot (RealNodeOptions.StorageSuite), so the kubelet pulls nothing.
const (
	storageSuiteRegistry = "thinlvm.test/e2e-test-images"
	// AgnhostImage is agnhost (k8s.io/kubernetes/test/images/agnhost)
	// beside busybox's applets: the suite's host-exec pods run sh and
	// nsenter in it, its subPath tests agnhost's mounttest.
	AgnhostImage = storageSuiteRegistry + "/agnhost:2.66.1"
	// storageSuiteBusybox is the suite's default test image.
	storageSuiteBusybox = storageSuiteRegistry + "/busybox:1.37.0-2"
	// storageSuiteNginx: the volumes suite's exec test runs /bin/sh -c in
	// the nginx image and nothing of nginx; busybox's image under its name.
	storageSuiteNginx = storageSuiteRegistry + "/nginx:1.27.0-2"
	// storageSuiteGlibcDNS: the multivolume suite's concurrent-access pods
	// write with GNU dd's oflag=nocache, which busybox's dd lacks (the
	// suite picks this image for it), and use nothing of its DNS tools:
	// busybox's applets with the host's GNU dd, and dash as sh: busybox's
	// sh runs its own dd whatever PATH holds (glibcDDEntries).
	storageSuiteGlibcDNS = storageSuiteRegistry + "/glibc-dns-testing:2.1.1"
	// storageSuitePause is the suite's pause image (gcRegistry).
	storageSuitePause = "thinlvm.test/pause:3.10.2"
)

// storageSuiteRepoList is KUBE_TEST_REPO_LIST's file: the registries of
// the images above.
const storageSuiteRepoList = "promoterE2eRegistry: " + storageSuiteRegistry + "\ngcRegistry: thinlvm.test\n"

// storageSuiteImages are the suite's images by name: busybox's as
// Debian's busybox-static with the test image's sh command, agnhost's
// binary (build.sh agnhost, a directory of its own) on the same applets
// (busyboxEntries, read once by nodeImages).
func (c *Cluster) storageSuiteImages(ctx context.Context, pause v1.Image, applets []tarEntry) (map[string]v1.Image, error) {
	dir, err := buildK8s(ctx, c.log, func(Progress) {}, nil, "agnhost")
	if err != nil {
		return nil, err
	}
	agnhost, err := os.ReadFile(filepath.Join(dir, "agnhost"))
	if err != nil {
		return nil, err
	}
	busybox, err := imageOf(applets, nil, []string{"sh"})
	if err != nil {
		return nil, err
	}
	withAgnhost := append(append([]tarEntry{}, applets...), tarEntry{name: "agnhost", data: agnhost, mode: 0o755},
		tarEntry{name: "agnhost-2", link: "agnhost"}, tarEntry{name: "uploads/", mode: 0o755})
	agn, err := imageOf(withAgnhost, []string{"/agnhost"}, []string{"pause"})
	if err != nil {
		return nil, err
	}
	withDD, err := glibcDDEntries(applets)
	if err != nil {
		return nil, err
	}
	glibc, err := imageOf(withDD, nil, []string{"sh"})
	if err != nil {
		return nil, err
	}
	return map[string]v1.Image{AgnhostImage: agn, storageSuiteBusybox: busybox, storageSuiteNginx: busybox, storageSuiteGlibcDNS: glibc, storageSuitePause: pause}, nil
}

// glibcDDEntries are busybox's applets with GNU coreutils' dd and dash as
// sh (the host's, Debian's) in their place, and the shared libraries ldd
// lists for them at their paths. busybox's sh would run its own dd
// applet, not the dd PATH finds.
func glibcDDEntries(applets []tarEntry) ([]tarEntry, error) {
	programs := map[string]string{"bin/dd": "/usr/bin/dd", "bin/sh": "/usr/bin/dash"} // Debian's coreutils and dash
	var entries []tarEntry
	for _, e := range applets {
		if programs[e.name] == "" {
			entries = append(entries, e)
		}
	}
	dirs := map[string]bool{"bin": true, "tmp": true}
	libs := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(programs)) {
		path := programs[name]
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("the glibc image's %s: %w", name, err)
		}
		entries = append(entries, tarEntry{name: name, data: data, mode: 0o755})
		out, err := exec.Command("ldd", path).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", path, err)
		}
		if entries, err = addLibraries(entries, dirs, libs, string(out)); err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// addLibraries adds the libraries of ldd's output (and their directories)
// that entries do not hold yet.
func addLibraries(entries []tarEntry, dirs, libs map[string]bool, ldd string) ([]tarEntry, error) {
	for _, line := range strings.Split(ldd, "\n") {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file.
		f := strings.Fields(line)
		if i := slices.Index(f, "=>"); i >= 0 {
			f = f[i+1:]
		}
		if len(f) == 0 || !strings.HasPrefix(f[0], "/") || libs[f[0]] {
			continue
		}
		libs[f[0]] = true
		lib, err := os.ReadFile(f[0])
		if err != nil {
			return nil, fmt.Errorf("library %s: %w", f[0], err)
		}
		name := strings.TrimPrefix(filepath.Clean(f[0]), "/")
		var parents []string // the nearest first
		for d := filepath.Dir(name); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			parents = append(parents, d)
		}
		for _, d := range slices.Backward(parents) {
			entries = append(entries, tarEntry{name: d + "/", mode: 0o755})
		}
		entries = append(entries, tarEntry{name: name, data: lib, mode: 0o755})
	}
	return entries, nil
}

// StorageSuiteOptions select what RunStorageSuite runs.
type StorageSuiteOptions struct {
	// Specs are the names of the specs to run, whole (without the
	// "External Storage [Driver: thinlvm.io] " prefix); empty runs every
	// spec of the driver but those Skip matches.
	Specs []string
	// Focus, with no Specs, is a regular expression the specs run must
	// match too.
	Focus string
	// Skip are regular expressions of specs left out.
	Skip []string
	// Dir receives the suite's JSON report and log.
	Dir string
	// Log receives the suite's output as it runs.
	Log io.Writer
}

// StorageSuitePrefix begins the name of every spec of thinlvm's driver.
const StorageSuitePrefix = "External Storage [Driver: thinlvm.io] "

// SpecResult is one spec's outcome.
type SpecResult struct {
	Name    string // without StorageSuitePrefix
	State   string // passed, failed, skipped, ...
	Seconds float64
	Message string // the failure's or the skip's
}

// RunStorageSuite builds (cached) e2e.test and runs thinlvm's External
// Storage specs against the cluster. It returns every spec's result; the
// error is for a suite that could not run, not for failed specs.
func (c *Cluster) RunStorageSuite(ctx context.Context, o StorageSuiteOptions) ([]SpecResult, error) {
	dir, err := buildK8s(ctx, c.log, func(Progress) {}, nil, "e2e.test")
	if err != nil {
		return nil, err
	}
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	repoList := filepath.Join(o.Dir, "repo-list.yaml")
	if err := os.WriteFile(repoList, []byte(storageSuiteRepoList), 0o644); err != nil {
		return nil, err
	}
	// The suite takes every schedulable node for one that runs the driver
	// (its topology tests read the driver's topology label from each):
	// the simulated nodes, which run no containers, are cordoned while it
	// runs.
	simulated, err := c.cordonSimulated(ctx, true)
	if err != nil {
		return nil, err
	}
	defer func() {
		if _, err := c.cordonSimulated(context.WithoutCancel(ctx), false); err != nil {
			fmt.Fprintf(c.log, "storage suite: uncordon the simulated nodes: %v\n", err)
		}
	}()
	focus := regexp.QuoteMeta(StorageSuitePrefix)
	if len(o.Specs) > 0 {
		alt := make([]string, len(o.Specs))
		for i, s := range o.Specs {
			alt[i] = regexp.QuoteMeta(s)
		}
		focus += "(" + strings.Join(alt, "|") + ")$"
	} else if o.Focus != "" {
		focus += ".*(" + o.Focus + ")"
	}
	report := filepath.Join(o.Dir, "report.json")
	args := []string{"-kubeconfig=" + c.Kubeconfig, "-repo-root=" + root, "-kubectl-path=" + filepath.Join(c.ControlBin, "kubectl"),
		"-storage.testdriver=" + filepath.Join(root, "e2e", "conformance", "driver.yaml"),
		"-ginkgo.focus=" + focus, "-ginkgo.json-report=" + report, "-ginkgo.no-color", "-ginkgo.v",
		"-ginkgo.timeout=4h", "-report-dir=" + o.Dir,
		// The simulated nodes, cordoned, are the nodes the suite may find
		// not schedulable.
		"-allowed-not-ready-nodes=" + strconv.Itoa(len(simulated))}
	if len(o.Skip) > 0 {
		args = append(args, "-ginkgo.skip="+strings.Join(o.Skip, "|"))
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "e2e.test"), args...)
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+repoList)
	logFile, err := os.Create(filepath.Join(o.Dir, "e2e.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	out := io.Writer(logFile)
	if o.Log != nil {
		out = io.MultiWriter(logFile, o.Log)
	}
	cmd.Stdout, cmd.Stderr = out, out
	fmt.Fprintf(c.log, "storage suite: %s %s\n", cmd.Path, strings.Join(args, " "))
	t0 := time.Now()
	runErr := cmd.Run()
	fmt.Fprintf(c.log, "storage suite: ended after %.1fs (%v)\n", time.Since(t0).Seconds(), runErr)
	results, err := readGinkgoReport(report)
	if err != nil {
		return nil, fmt.Errorf("e2e.test (%w): %w", runErr, err)
	}
	return results, nil
}

// cordonSimulated sets spec.unschedulable of the simulated (kwok) nodes
// and returns their names.
func (c *Cluster) cordonSimulated(ctx context.Context, cordon bool) ([]string, error) {
	var nodes corev1.NodeList
	if err := c.Client.List(ctx, &nodes); err != nil {
		return nil, err
	}
	var names []string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if _, fake := n.Annotations["kwok.x-k8s.io/node"]; !fake {
			continue
		}
		names = append(names, n.Name)
		if n.Spec.Unschedulable == cordon {
			continue
		}
		patch := client.MergeFrom(n.DeepCopy())
		n.Spec.Unschedulable = cordon
		if err := c.Client.Patch(ctx, n, patch); err != nil {
			return nil, fmt.Errorf("cordon node %s: %w", n.Name, err)
		}
	}
	return names, nil
}

// readGinkgoReport reads the specs of thinlvm's driver from ginkgo's JSON
// report (github.com/onsi/ginkgo/v2/types.Report, the fields used).
func readGinkgoReport(path string) ([]SpecResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reports []struct {
		SpecReports []struct {
			ContainerHierarchyTexts []string
			LeafNodeText            string
			LeafNodeType            string
			State                   string
			RunTime                 time.Duration
			Failure                 struct{ Message string }
		}
	}
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("ginkgo's report %s: %w", path, err)
	}
	var out []SpecResult
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType != "It" {
				continue
			}
			name := strings.Join(append(append([]string{}, s.ContainerHierarchyTexts...), s.LeafNodeText), " ")
			if !strings.HasPrefix(name, StorageSuitePrefix) {
				continue
			}
			out = append(out, SpecResult{Name: strings.TrimPrefix(name, StorageSuitePrefix), State: s.State,
				Seconds: s.RunTime.Seconds(), Message: s.Failure.Message})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ReadSpecList reads a list of spec names or patterns (e2e/conformance's
// ci-specs.txt, excluded.txt): one per line, "#" comments and blank lines
// ignored; in excluded.txt a line is "pattern  # reason".
func ReadSpecList(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	return out, sc.Err()
}
