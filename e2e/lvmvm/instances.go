package lvmvm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// LVMDInstance is a thinlvm lvmd started beside (or instead of) the one on
// LVMDPort, serving gRPC and metrics on guest ports of its own: several
// lvmds in one boot, each on its own volume groups (e.g. one per lvm
// runner, side by side).
type LVMDInstance struct {
	vm          *VM
	name        string
	port        int
	metricsPort int
	// PID is lvmd's process id in the guest.
	PID int
}

// StartLVMDInstance writes configYAML to /share/<name>.yaml and starts
// thinlvm-lvmd as the agent's process name, serving gRPC on guest port
// port and metrics on metricsPort (both in Options.GuestPorts), logging to
// /share/<name>.log; it waits until lvmd's health service answers SERVING.
func (vm *VM) StartLVMDInstance(ctx context.Context, name string, port, metricsPort int, configYAML string, extraArgs ...string) (*LVMDInstance, error) {
	for _, p := range []int{port, metricsPort} {
		if _, ok := vm.ports[p]; !ok {
			return nil, fmt.Errorf("lvmd %s: guest port %d is not forwarded (add it to Options.GuestPorts)", name, p)
		}
	}
	if name == "" || strings.ContainsAny(name, "/ ") || name == lvmdProcess || name == nodeProcess {
		return nil, fmt.Errorf("lvmd instance name %q: want a plain name other than %q and %q", name, lvmdProcess, nodeProcess)
	}
	if err := os.WriteFile(filepath.Join(vm.ShareDir(), name+".yaml"), []byte(configYAML), 0o644); err != nil {
		return nil, err
	}
	argv := append([]string{"/share/bin/thinlvm-lvmd", "--config", "/share/" + name + ".yaml",
		"--listen", fmt.Sprintf("tcp://0.0.0.0:%d", port),
		"--metrics-address", fmt.Sprintf("0.0.0.0:%d", metricsPort)}, extraArgs...)
	pid, err := vm.SpawnPID(ctx, name, "/share/"+name+".log", argv...)
	if err != nil {
		return nil, err
	}
	in := &LVMDInstance{vm: vm, name: name, port: port, metricsPort: metricsPort, PID: pid}
	if err := vm.WaitServing(ctx, port, in.Log); err != nil {
		return nil, fmt.Errorf("lvmd %s: %w", name, err)
	}
	return in, nil
}

// Dial connects to the instance through its forward.
func (in *LVMDInstance) Dial() (*grpc.ClientConn, error) { return in.vm.DialGuest(in.port) }

// Log returns the instance's log.
func (in *LVMDInstance) Log() string {
	b, _ := os.ReadFile(filepath.Join(in.vm.ShareDir(), in.name+".log"))
	return string(b)
}

// Stop sends sig to the instance and waits for it to exit.
func (in *LVMDInstance) Stop(ctx context.Context, sig syscall.Signal) error {
	return in.vm.Signal(ctx, in.name, sig, true)
}

// Metrics scrapes the instance's Prometheus metrics.
func (in *LVMDInstance) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	return scrape(ctx, in.vm.Addr(in.metricsPort), "lvmd "+in.name)
}

// SpawnPID is Spawn that returns the process's pid in the guest.
func (vm *VM) SpawnPID(ctx context.Context, name, logPath string, argv ...string) (int, error) {
	var pid int
	if err := vm.post(ctx, "/spawn", map[string]any{"name": name, "argv": argv, "logPath": logPath}, &pid); err != nil {
		return 0, err
	}
	if pid <= 0 {
		return 0, fmt.Errorf("spawn %s: the agent answered pid %d", name, pid)
	}
	return pid, nil
}

// DialGuest connects to a gRPC server on a forwarded guest port.
func (vm *VM) DialGuest(guestPort int) (*grpc.ClientConn, error) {
	if _, ok := vm.ports[guestPort]; !ok {
		return nil, fmt.Errorf("guest port %d is not forwarded (add it to Options.GuestPorts)", guestPort)
	}
	return grpc.NewClient("passthrough:///"+vm.Addr(guestPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// WaitServing waits up to a minute for the gRPC health service on a
// forwarded guest port to answer SERVING; logf (may be nil) gives the
// server's log for the error.
func (vm *VM) WaitServing(ctx context.Context, guestPort int, logf func() string) error {
	conn, err := vm.DialGuest(guestPort)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("guest port %d not serving after 1m (%v)", guestPort, err)
			if logf != nil {
				l := logf()
				if len(l) > 4000 {
					l = l[len(l)-4000:]
				}
				msg += "; log:\n" + l
			}
			return fmt.Errorf("%s", msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
