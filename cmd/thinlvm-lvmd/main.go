// Command thinlvm-lvmd is lvmd: the node daemon that runs lvm2 behind a gRPC
// API on a unix socket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/klog/v2"

	"github.com/thinlvm/thinlvm/cmd/internal/endpoint"
	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm"
	"github.com/thinlvm/thinlvm/lvmd/server"
)

type options struct {
	configPath      string
	listen          string
	metricsAddress  string
	lvmPath         string
	dmsetupPath     string
	thinDeltaPath   string
	lvmMonitoring   bool
	lvmRunner       string
	lvmPrefix       string
	shellMax        int
	commandTimeout  time.Duration
	refreshInterval time.Duration
}

func main() {
	var o options
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	fs.StringVar(&o.configPath, "config", "/etc/thinlvm/lvmd.yaml", "Path of the device-class configuration file.")
	fs.StringVar(&o.listen, "listen", "unix:///run/thinlvm/lvmd.sock", "Where to serve gRPC: unix:///path (mode 0600) or tcp://HOST:PORT (tests only).")
	fs.StringVar(&o.metricsAddress, "metrics-address", "", "Serve Prometheus metrics on unix:///path (mode 0600: the node agent serves them again behind its authentication) or HOST:PORT (plain HTTP to anyone who reaches it; tests); empty for none.")
	fs.StringVar(&o.lvmPath, "lvm-path", "lvm", "The lvm binary.")
	fs.StringVar(&o.dmsetupPath, "dmsetup-path", "dmsetup", "The dmsetup binary (GetThinDelta reserves and releases thin pool metadata snapshots with it).")
	fs.StringVar(&o.thinDeltaPath, "thin-delta-path", "thin_delta", "The thin_delta binary of thin-provisioning-tools (GetThinDelta).")
	fs.BoolVar(&o.lvmMonitoring, "lvm-monitoring", true, "Let lvm register the volumes it activates with dmeventd (lvm.conf's activation/monitoring). In a container set it false: the host's dmeventd is not reachable from there, and lvm would start one of its own (see docs/lvmd.md).")
	fs.StringVar(&o.lvmRunner, "lvm-runner", "shell", "How lvmd runs lvm: shell (one long-lived lvm shell takes every command, its results read from lvm's JSON log report) or exec (one lvm process per command). dmsetup and thin_delta are always processes of their own.")
	fs.StringVar(&o.lvmPrefix, "lvm-command-prefix", "", "Words put before every lvm, dmsetup and thin_delta command line, split at spaces, e.g. \"nsenter --target=1 --mount --\" to run the host's tools from a container (the pod needs hostPID). Only with --lvm-runner=exec; empty runs the tools directly.")
	fs.IntVar(&o.shellMax, "lvm-shell-max-commands", lvm.DefaultShellMaxCommands, "With --lvm-runner=shell: replace the lvm shell (between two commands) after this many, bounding its memory.")
	fs.DurationVar(&o.commandTimeout, "command-timeout", 2*time.Minute, "How long lvmd waits for one lvm command. A command is never killed: past this the caller gets DeadlineExceeded, the command runs to its end, and lvmd re-reads the report before the next one.")
	fs.DurationVar(&o.refreshInterval, "refresh-interval", 30*time.Second, "Refresh the lvm report this often when nothing changed it.")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background()
	if err := run(ctx, o, logger); err != nil {
		logger.Error(err, "lvmd failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, logger klog.Logger) error {
	cfg, err := config.Load(o.configPath)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := server.NewMetrics(reg)
	prefix, err := commandPrefix(o.lvmPrefix, o.lvmRunner)
	if err != nil {
		return err
	}
	execRunner := &lvm.ExecRunner{Path: o.lvmPath, DMSetupPath: o.dmsetupPath, ThinDeltaPath: o.thinDeltaPath, Prefix: prefix, OnRun: metrics.ObserveLVMCommand}
	if !o.lvmMonitoring {
		execRunner.Config = "activation/monitoring=0"
	}
	var runner lvm.Runner = execRunner
	switch o.lvmRunner {
	case "exec":
	case "shell":
		sh := &lvm.ShellRunner{Path: o.lvmPath, Config: execRunner.Config, MaxCommands: o.shellMax, Exec: execRunner,
			OnRun: metrics.ObserveLVMCommand, OnStart: metrics.ObserveShellStart, Log: logger.WithName("lvm-shell")}
		sctx, scancel := context.WithTimeout(ctx, o.commandTimeout)
		err := sh.Start(sctx)
		scancel()
		if err != nil {
			return fmt.Errorf("--lvm-runner=shell: %w (--lvm-runner=exec runs one lvm process per command instead)", err)
		}
		defer func() {
			cctx, ccancel := context.WithTimeout(context.Background(), o.commandTimeout)
			defer ccancel()
			if err := sh.Close(cctx); err != nil {
				logger.Info("lvm shell left running", "error", err)
			}
		}()
		runner = sh
	default:
		return fmt.Errorf("--lvm-runner: %q is neither shell nor exec", o.lvmRunner)
	}
	// lvm2 makes its device nodes under $DM_DEV_DIR when that is set.
	d := server.New(cfg, runner, metrics, server.Options{CommandTimeout: o.commandTimeout, RefreshInterval: o.refreshInterval,
		DevDir: os.Getenv("DM_DEV_DIR")}, logger)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		return err
	}
	lis, err := endpoint.Listen(o.listen)
	if err != nil {
		return err
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(d.UnaryInterceptor), grpc.StreamInterceptor(d.StreamInterceptor))
	d.Register(gs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)

	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(lis) }()
	var ms *http.Server
	if o.metricsAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ml, err := metricsListener(o.metricsAddress)
		if err != nil {
			return err
		}
		ms = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := ms.Serve(ml); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics server: %w", err)
			}
		}()
	}
	logger.Info("lvmd serving", "listen", o.listen, "lvmRunner", o.lvmRunner, "lvmCommandPrefix", prefix, "metricsAddress", o.metricsAddress, "deviceClasses", len(cfg.DeviceClasses))

	select {
	case <-ctx.Done():
		logger.Info("lvmd stopping")
	case err = <-errc:
	}
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		gs.Stop()
	}
	if ms != nil {
		_ = ms.Close()
	}
	// An lvm command killed with lvmd could leave a thin pool suspended:
	// wait for what still runs (the pod's grace period bounds this too).
	dctx, dcancel := context.WithTimeout(context.Background(), o.commandTimeout)
	defer dcancel()
	if derr := d.Drain(dctx); derr != nil {
		logger.Info("lvmd exits with an lvm command still running", "error", derr)
	}
	return err
}

// commandPrefix is --lvm-command-prefix split into words: what the exec
// runner puts before every command line. The lvm shell runs lvm itself, not
// through a prefix, and would mix the two lvms with the tools it leaves to
// the exec runner: the prefix needs --lvm-runner=exec. Its first word must
// be a program lvmd finds, so that a typo fails at start, not at the first
// volume.
func commandPrefix(s, runner string) ([]string, error) {
	prefix := strings.Fields(s)
	if len(prefix) == 0 {
		return nil, nil
	}
	if runner != "exec" {
		return nil, fmt.Errorf("--lvm-command-prefix needs --lvm-runner=exec (the lvm shell does not run through it), not --lvm-runner=%s", runner)
	}
	if _, err := exec.LookPath(prefix[0]); err != nil {
		return nil, fmt.Errorf("--lvm-command-prefix: %w", err)
	}
	return prefix, nil
}

// metricsListener listens on unix:///path (through endpoint.Listen: mode
// 0600) or on HOST:PORT.
func metricsListener(addr string) (net.Listener, error) {
	if strings.HasPrefix(addr, "unix://") {
		return endpoint.Listen(addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	return l, nil
}
