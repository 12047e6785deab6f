package lvmvm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Guest ports the harness forwards.
const (
	AgentPort       = 7000
	LVMDPort        = 7001
	LVMDMetricsPort = 7002
	CSIPort         = 7003
	// TransferPort is the node agent's transfer endpoint (the node
	// DaemonSet's --transfer-address), forwarded when Options.GuestPorts
	// names it.
	TransferPort = 9443
)

// Options configure a VM.
type Options struct {
	// Disks are the sizes of fresh sparse raw disks (/dev/vda, /dev/vdb,
	// ...), e.g. "16G". Default one of 16G.
	Disks []string
	// GuestPorts are forwarded from 127.0.0.1 on the host. The agent's and
	// lvmd's ports are always forwarded.
	GuestPorts []int
	// MemoryMB is the guest memory; default 2048.
	MemoryMB int
	// CPUs is the guest's vCPUs; default one (on a 2-core host TCG runs
	// lvm faster with one than two). A real node's many processes (the
	// kubelet, containerd and its shims, the node plugin) want two.
	CPUs int
	// Packages are extra main packages of this module to build statically
	// into /share/bin; thinlvm-lvmd, thinlvm-node and the guest agent
	// always are.
	Packages []string
	// HostLoopback lets the guest reach the host's 127.0.0.1 as
	// HostAddress (the API server, a test's HTTP server). Without it the
	// guest can send nothing out.
	HostLoopback bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Init is a guest script (a /ctl or /share path) started in the
	// background at every boot, before the guest agent: a real node's
	// services (e2e/cluster's node-init.sh), which a reboot starts again.
	Init string
	// Files are written into the control share (/ctl in the guest) before
	// boot, by path relative to it.
	Files map[string][]byte
	// TmpfsRoot runs the guest from a tmpfs copy of its initramfs, whose
	// root pivot_root can leave: a real node's container runtime needs it.
	TmpfsRoot bool
	// Links are host files put into the binaries share (/share in the
	// guest), by path relative to it: hard links where the file system
	// allows, copies elsewhere (9p does not follow links out of a share).
	Links map[string]string
}

// HostAddress is the host's loopback as the guest sees it with
// Options.HostLoopback (qemu user networking's gateway).
const HostAddress = "10.0.2.2"

// GuestAddress is the guest's own address on qemu's user network (the one
// guest-init.sh gives it): a node's address, for what runs in the VM.
const GuestAddress = "10.0.2.15"

// VM is a running test VM.
type VM struct {
	dir     string // host work dir: ctl/, share/, disks, console.log
	ports   map[int]int
	args    []string // qemu's, for Reboot
	qemu    *exec.Cmd
	exited  chan struct{}
	waitErr error
	client  *http.Client
	log     io.Writer
	// BootSeconds is how long the VM took from qemu start to the agent's
	// first answer.
	BootSeconds float64
}

// ImageDir is where build-image.sh put the kernel and initramfs.
func ImageDir() string {
	if d := os.Getenv("LVMVM_DIR"); d != "" {
		return filepath.Join(d, "image")
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "thinlvm", "lvmvm", "image")
	}
	return filepath.Join(os.Getenv("HOME"), ".cache", "thinlvm", "lvmvm", "image")
}

// moduleRoot finds the directory of this module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the thinlvm module")
	}
	return filepath.Dir(gomod), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start builds the guest binaries, boots the VM and waits for its agent.
func Start(ctx context.Context, o Options) (vm *VM, err error) {
	img := ImageDir()
	kernel := filepath.Join(img, "vmlinux")
	if _, err := os.Stat(kernel); err != nil {
		kernel = filepath.Join(img, "vmlinuz")
	}
	initrd := filepath.Join(img, "initrd.img")
	for _, f := range []string{kernel, initrd} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("VM image missing (%w): run 'make lvmvm-image'", err)
		}
	}
	if len(o.Disks) == 0 {
		o.Disks = []string{"16G"}
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = 2048
	}
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	dir, err := os.MkdirTemp("", "thinlvm-lvmvm-")
	if err != nil {
		return nil, err
	}
	vm = &VM{dir: dir, ports: map[int]int{}, exited: make(chan struct{}), log: logw,
		client: &http.Client{Timeout: 10 * time.Minute}}
	defer func() {
		if err != nil {
			vm.Stop()
		}
	}()
	for _, d := range []string{"ctl", "share/bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return vm, err
		}
	}

	root, err := moduleRoot()
	if err != nil {
		return vm, err
	}
	pkgs := append([]string{"./cmd/thinlvm-lvmd", "./cmd/thinlvm-node", "./e2e/lvmvm/guestagent"}, o.Packages...)
	build := exec.CommandContext(ctx, "go", append([]string{"build", "-trimpath", "-o", filepath.Join(dir, "share", "bin") + "/"}, pkgs...)...)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return vm, fmt.Errorf("build guest binaries: %w\n%s", err, out)
	}

	cmd := fmt.Sprintf("exec /share/bin/guestagent -listen :%d >> /share/guestagent.log 2>&1\n", AgentPort)
	if o.Init != "" {
		cmd = fmt.Sprintf("sh %s >> /share/init.log 2>&1 &\n", o.Init) + cmd
	}
	if err := os.WriteFile(filepath.Join(dir, "ctl", "cmd"), []byte(cmd), 0o644); err != nil {
		return vm, err
	}
	for name, data := range o.Files {
		p := filepath.Join(dir, "ctl", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return vm, err
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return vm, err
		}
	}
	for name, src := range o.Links {
		if err := linkOrCopy(src, filepath.Join(dir, "share", name)); err != nil {
			return vm, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ctl", "ndisks"), []byte(strconv.Itoa(len(o.Disks))), 0o644); err != nil {
		return vm, err
	}

	cmdline := "console=ttyS0 quiet panic=-1"
	if o.TmpfsRoot {
		cmdline += " lvmvm.tmpfsroot"
	}
	args := []string{"-machine", "q35", "-accel", "tcg", "-cpu", "max", "-m", strconv.Itoa(o.MemoryMB),
		"-smp", strconv.Itoa(max(o.CPUs, 1)), "-display", "none", "-monitor", "none", "-serial", "stdio", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd, "-append", cmdline,
		"-virtfs", "local,path=" + filepath.Join(dir, "ctl") + ",mount_tag=ctl,security_model=none,id=ctl",
		"-virtfs", "local,path=" + filepath.Join(dir, "share") + ",mount_tag=share,security_model=none,id=share",
	}
	for i, size := range o.Disks {
		bytes, err := parseSize(size)
		if err != nil {
			return vm, err
		}
		path := filepath.Join(dir, fmt.Sprintf("disk%d.raw", i))
		if err := createSparse(path, bytes); err != nil {
			return vm, err
		}
		// cache=unsafe: no host fsync; discard=unmap keeps the file sparse.
		args = append(args, "-drive", fmt.Sprintf("file=%s,format=raw,if=none,id=d%d,cache=unsafe,discard=unmap,aio=threads", path, i),
			"-device", fmt.Sprintf("virtio-blk-pci,drive=d%d,serial=lvmvm%d", i, i))
	}
	// restrict=on: the guest cannot send anything out; the host reaches it
	// only through forwards bound to 127.0.0.1. With HostLoopback the
	// guest's connections to HostAddress reach the host's loopback.
	netdev := "user,id=n0,restrict=on"
	if o.HostLoopback {
		netdev = "user,id=n0,restrict=off"
	}
	for _, gp := range append([]int{AgentPort, LVMDPort, LVMDMetricsPort, CSIPort}, o.GuestPorts...) {
		if _, ok := vm.ports[gp]; ok {
			continue
		}
		hp, err := freePort()
		if err != nil {
			return vm, err
		}
		vm.ports[gp] = hp
		netdev += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-:%d", hp, gp)
	}
	args = append(args, "-netdev", netdev, "-device", "virtio-net-pci,netdev=n0")
	vm.args = args
	if err := vm.boot(ctx); err != nil {
		return vm, err
	}
	fmt.Fprintf(logw, "lvmvm: guest ready in %.1fs\n", vm.BootSeconds)
	return vm, nil
}

// boot starts qemu and waits for the guest agent.
func (vm *VM) boot(ctx context.Context) error {
	console, err := os.OpenFile(filepath.Join(vm.dir, "console.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	vm.exited = make(chan struct{})
	vm.qemu = exec.Command("qemu-system-x86_64", vm.args...)
	vm.qemu.Stdout, vm.qemu.Stderr = console, console
	vm.qemu.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := vm.qemu.Start(); err != nil {
		console.Close()
		return fmt.Errorf("start qemu: %w", err)
	}
	qemu, exited := vm.qemu, vm.exited
	go func() {
		vm.waitErr = qemu.Wait()
		console.Close()
		close(exited)
	}()
	fmt.Fprintf(vm.log, "lvmvm: qemu started (pid %d), work dir %s\n", vm.qemu.Process.Pid, vm.dir)

	// hostfwd accepts before the guest listens: only a real answer counts.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if err := vm.health(ctx); err == nil {
			break
		}
		select {
		case <-exited:
			return fmt.Errorf("VM exited during boot (%w); console:\n%s", vm.waitErr, vm.Console())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("VM agent not ready after 3m; console:\n%s", vm.Console())
		}
	}
	vm.BootSeconds = time.Since(start).Seconds()
	return nil
}

// Reboot powers the guest off and boots it again with the same disks,
// shares and forwarded ports: what is on the disks stays, what the guest
// held in memory (/run, /tmp, its processes) is gone. Options.Init runs
// again.
func (vm *VM) Reboot(ctx context.Context) error {
	vm.powerOff()
	if err := vm.boot(ctx); err != nil {
		return fmt.Errorf("reboot: %w", err)
	}
	fmt.Fprintf(vm.log, "lvmvm: guest rebooted in %.1fs\n", vm.BootSeconds)
	return nil
}

// linkOrCopy puts src at dst: a hard link, or a copy across file systems.
func linkOrCopy(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func (vm *VM) health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+vm.Addr(AgentPort)+"/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		return fmt.Errorf("agent health: %s", resp.Status)
	}
	return nil
}

// Addr is the host address (127.0.0.1:PORT) forwarded to a guest port.
func (vm *VM) Addr(guestPort int) string {
	return fmt.Sprintf("127.0.0.1:%d", vm.ports[guestPort])
}

// ShareDir is the host directory the guest sees as /share.
func (vm *VM) ShareDir() string { return filepath.Join(vm.dir, "share") }

// Console returns the tail of the serial console.
func (vm *VM) Console() string {
	b, _ := os.ReadFile(filepath.Join(vm.dir, "console.log"))
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// ExecResult is a finished guest command.
type ExecResult struct {
	Stdout   []byte  `json:"stdout"`
	Stderr   []byte  `json:"stderr"`
	ExitCode int     `json:"exitCode"`
	Seconds  float64 `json:"seconds"`
}

func (vm *VM) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+vm.Addr(AgentPort)+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := vm.client.Do(req)
	if err != nil {
		return fmt.Errorf("guest agent %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("guest agent %s: %s: %s", path, resp.Status, strings.TrimSpace(string(data)))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Exec runs argv in the guest (no shell) and returns its outcome, whatever
// its exit code.
func (vm *VM) Exec(ctx context.Context, argv ...string) (*ExecResult, error) {
	var res ExecResult
	if err := vm.post(ctx, "/exec", map[string]any{"argv": argv}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Checksum is the XXH64 (hex) of the whole file or device at path in the
// guest, computed there, and its size.
func (vm *VM) Checksum(ctx context.Context, path string) (string, int64, error) {
	var res struct {
		XXH64 string `json:"xxh64"`
		Bytes int64  `json:"bytes"`
	}
	if err := vm.post(ctx, "/sum", map[string]any{"path": path}, &res); err != nil {
		return "", 0, err
	}
	return res.XXH64, res.Bytes, nil
}

// Run runs argv in the guest and returns its stdout; a non-zero exit is an
// error carrying stderr.
func (vm *VM) Run(ctx context.Context, argv ...string) (string, error) {
	res, err := vm.Exec(ctx, argv...)
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return string(res.Stdout), fmt.Errorf("guest %q: exit code %d: %s", strings.Join(argv, " "), res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	return string(res.Stdout), nil
}

// Spawn starts a named long-running guest process with its output in
// logPath (a guest path).
func (vm *VM) Spawn(ctx context.Context, name, logPath string, argv ...string) error {
	return vm.post(ctx, "/spawn", map[string]any{"name": name, "argv": argv, "logPath": logPath}, nil)
}

// Signal sends sig to a spawned process and, with wait, waits for its exit.
func (vm *VM) Signal(ctx context.Context, name string, sig syscall.Signal, wait bool) error {
	return vm.post(ctx, "/signal", map[string]any{"name": name, "signal": int(sig), "wait": wait}, nil)
}

// Stop powers the VM off (killing qemu if it does not stop) and removes its
// work directory.
func (vm *VM) Stop() {
	vm.powerOff()
	if os.Getenv("LVMVM_KEEP") == "" {
		_ = os.RemoveAll(vm.dir)
	}
}

// powerOff asks the guest to power off and kills qemu if it does not.
func (vm *VM) powerOff() {
	if vm.qemu == nil || vm.qemu.Process == nil {
		return
	}
	select {
	case <-vm.exited:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = vm.post(ctx, "/poweroff", struct{}{}, nil)
	cancel()
	select {
	case <-vm.exited:
	case <-time.After(20 * time.Second):
		_ = vm.qemu.Process.Kill()
		<-vm.exited
	}
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("disk size %q: want e.g. 16G or 512M", s)
	}
	return n * mult, nil
}

func createSparse(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
