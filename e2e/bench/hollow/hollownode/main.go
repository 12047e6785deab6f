// Command hollownode runs the API side of many thinlvm node agents in one
// process, as kubemark's hollow nodes run kubelets: for each node the real
// agent (node/agent: its field-selected cache, the LogicalVolume and golden
// base reconcilers, the LVMNode publisher) on a manager of its own, with
// the node's own client identity (a token bound to the node's thinlvm-node
// pod) and its own lvmd, the real lvmd code on the simulated lvm
// (lvmd/lvmdtest). It serves, on a loopback address, its Go runtime and
// process metrics and what its agents asked of the API server and
// received from it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/lvmd/lvmdtest"
	"github.com/thinlvm/thinlvm/node/agent"
)

// writing is whether the simulated volumes are being written.
var writing atomic.Bool

// Node is one hollow node: its name and the token of its agent.
type Node struct {
	Name  string `json:"name"`
	Token string `json:"token"`
}

type metrics struct {
	requests *prometheus.CounterVec
	events   *prometheus.CounterVec
	synced   prometheus.Gauge
	failed   prometheus.Counter
}

func main() {
	nodesFile := flag.String("nodes", "", "JSON file of the nodes to run: [{name, token}].")
	server := flag.String("server", "", "The API server's URL.")
	caFile := flag.String("ca-file", "", "The API server's CA certificate.")
	listen := flag.String("metrics-address", "127.0.0.1:0", "Loopback address of the metrics.")
	refresh := flag.Duration("lvmd-refresh", 10*time.Second, "How often each simulated lvmd re-reads its lvm.")
	parallel := flag.Int("start-parallel", 20, "Agents started at once.")
	flag.Parse()
	if err := run(*nodesFile, *server, *caFile, *listen, *refresh, *parallel); err != nil {
		fmt.Fprintln(os.Stderr, "hollownode:", err)
		os.Exit(1)
	}
}

func run(nodesFile, server, caFile, listen string, refresh time.Duration, parallel int) error {
	data, err := os.ReadFile(nodesFile)
	if err != nil {
		return err
	}
	var nodes []Node
	if err := json.Unmarshal(data, &nodes); err != nil {
		return fmt.Errorf("%s: %w", nodesFile, err)
	}
	if host, _, err := net.SplitHostPort(listen); err != nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("--metrics-address %q: must be a loopback address", listen)
	}
	// The agents' own logs: errors only, to stderr.
	ctrl.SetLogger(klog.Background().V(1))
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := thinlvmv1.AddToScheme(scheme); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hollow_api_requests_total",
			Help: "Requests the agents sent the API server, by verb (GET, LIST, WATCH, CREATE, UPDATE, PATCH, DELETE) and resource[/subresource]."},
			[]string{"verb", "resource"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hollow_watch_events_total",
			Help: "Watch events the agents' caches received, by kind and whose (own: of the agent's node; other: of another node; cluster: GoldenImages)."},
			[]string{"kind", "whose"}),
		synced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hollow_agents_synced", Help: "Agents whose caches synced."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "hollow_agents_failed_total", Help: "Agents that failed to start or stopped with an error."}),
	}
	reg.MustRegister(m.requests, m.events, m.synced, m.failed)
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("gc") {
			goruntime.GC() // the heap's live size, not its garbage
		}
		metricsHandler.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	fmt.Printf("metrics %s\n", lis.Addr())

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	// SIGUSR1 toggles writing: every pool's data use then grows a little
	// every 10s, as volumes being written move it.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			writing.Store(!writing.Load())
		}
	}()
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for _, n := range nodes {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := runAgent(ctx, n, server, caFile, refresh, scheme, m, func() { <-sem })
			if err != nil && ctx.Err() == nil {
				m.failed.Inc()
				fmt.Fprintf(os.Stderr, "hollownode: agent of %s: %v\n", n.Name, err)
			}
		}()
	}
	wg.Wait()
	return nil
}

// runAgent runs the agent of n until ctx ends; started is called once its
// cache synced (or it failed before).
func runAgent(ctx context.Context, n Node, server, caFile string, refresh time.Duration, scheme *runtime.Scheme, m *metrics, started func()) error {
	once := sync.OnceFunc(started)
	defer once()
	lvmd, stop, err := lvmdtest.Run(lvmdtest.Options{RefreshInterval: refresh, BufferSize: 64 << 10})
	if err != nil {
		return err
	}
	defer stop()
	go func() {
		use := 1.0
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if writing.Load() {
					use += 0.01
					lvmd.LVM.SetPoolUsage("vg0", "pool0", use, 1)
				}
			}
		}
	}()
	cfg := &rest.Config{Host: server, BearerToken: n.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: caFile},
		UserAgent: "thinlvm-node/hollow (" + n.Name + ")"}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &counting{next: rt, m: m} })
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Cache: agent.Cache(n.Name), Logger: logr.Discard(),
		Metrics: metricsserver.Options{BindAddress: "0"}, Controller: config.Controller{SkipNameValidation: new(true)}})
	if err != nil {
		return err
	}
	// Test-speed intervals of the end-to-end suites, but the default time
	// between writes of pool use alone.
	if err := agent.Setup(mgr, agent.Options{NodeName: n.Name, LVMD: lvmd, Metrics: prometheus.NewRegistry(),
		PublishInterval: 2 * time.Second, NoSpaceRetryAfter: 5 * time.Second, GoldenRetry: 5 * time.Second}); err != nil {
		return err
	}
	if err := countEvents(ctx, mgr, n.Name, m); err != nil {
		return err
	}
	go func() {
		if mgr.GetCache().WaitForCacheSync(ctx) {
			m.synced.Inc()
		}
		once()
	}()
	return mgr.Start(ctx)
}

// countEvents counts the watch events of the agent's informers.
func countEvents(ctx context.Context, mgr ctrl.Manager, node string, m *metrics) error {
	for kind, obj := range map[string]client.Object{"LogicalVolume": &thinlvmv1.LogicalVolume{}, "Node": &corev1.Node{},
		"LVMNode": &thinlvmv1.LVMNode{}, "GoldenImage": &thinlvmv1.GoldenImage{}} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		count := func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			whose := "other"
			switch o := o.(type) {
			case *thinlvmv1.GoldenImage:
				whose = "cluster"
			case *thinlvmv1.LogicalVolume:
				if o.Spec.NodeName == node {
					whose = "own"
				}
			case client.Object:
				if o.GetName() == node {
					whose = "own"
				}
			}
			m.events.WithLabelValues(kind, whose).Inc()
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: count,
			UpdateFunc: func(_, o any) { count(o) }, DeleteFunc: count}); err != nil {
			return err
		}
	}
	return nil
}

// counting counts the requests through it by verb and resource.
type counting struct {
	next http.RoundTripper
	m    *metrics
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	verb, resource := classify(r)
	c.m.requests.WithLabelValues(verb, resource).Inc()
	return c.next.RoundTrip(r)
}

// classify names a request as the API server's audit does: its verb and
// resource[/subresource], from the method, the path and ?watch.
func classify(r *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return r.Method, "other"
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	named := len(parts) >= 2
	if len(parts) >= 3 {
		resource = parts[0] + "/" + parts[2]
	} else if len(parts) >= 1 {
		resource = parts[0]
	}
	switch r.Method {
	case http.MethodGet:
		switch {
		case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
			verb = "WATCH"
		case named:
			verb = "GET"
		default:
			verb = "LIST"
		}
	case http.MethodPost:
		verb = "CREATE"
	case http.MethodPut:
		verb = "UPDATE"
	default:
		verb = r.Method
	}
	return verb, resource
}
