package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/envtest"
	"github.com/thinlvm/thinlvm/internal/testutil"
	"github.com/thinlvm/thinlvm/lvmd/lvmdtest"
	"github.com/thinlvm/thinlvm/node/agent"
)

var (
	cfg       *rest.Config
	k8sClient client.Client
)

func TestMain(m *testing.M) {
	envtest.Main(m, func(env *envtest.Env) { cfg, k8sClient = env.Config, env.Client })
}

// seen counts the watch events an agent's cache received, by the node of
// the object.
type seen struct {
	mu     sync.Mutex
	byNode map[string]int
	names  map[string]bool
}

func (s *seen) add(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	var node, name string
	switch o := obj.(type) {
	case *thinlvmv1.LogicalVolume:
		node, name = o.Spec.NodeName, o.Name
	case client.Object:
		node, name = o.GetName(), o.GetName() // Nodes and LVMNodes are named for their node
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byNode[node]++
	s.names[name] = true
}

func (s *seen) count(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byNode[node]
}

func (s *seen) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[name]
}

func lv(name, node string) *thinlvmv1.LogicalVolume {
	return &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: thinlvmv1.LogicalVolumeSpec{Name: name, NodeName: node, Size: resource.MustParse("1Gi")}}
}

func ready(name string) func() bool {
	return func() bool {
		got := &thinlvmv1.LogicalVolume{}
		return k8sClient.Get(context.Background(), types.NamespacedName{Name: name}, got) == nil &&
			meta.IsStatusConditionTrue(got.Status.Conditions, thinlvmv1.ConditionReady)
	}
}

// TestAgentWatchesOnlyItsNode runs the agent of node "near" on the real API
// server while another node's volumes are created, changed and deleted: the
// agent's watches deliver no event of them (the API server selects by
// spec.nodeName), its cache holds none of them, and it still reads one by
// name when its own volume is cloned from it.
func TestAgentWatchesOnlyItsNode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, n := range []string{"near", "far"} {
		if err := k8sClient.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme.Scheme, Cache: agent.Cache("near"),
		Metrics: metricsserver.Options{BindAddress: "0"}, Controller: config.Controller{SkipNameValidation: new(true)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Setup(mgr, agent.Options{NodeName: "near", LVMD: lvmdtest.Start(t, lvmdtest.Options{}), Metrics: prometheus.NewRegistry(),
		PublishInterval: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	events := &seen{byNode: map[string]int{}, names: map[string]bool{}}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { events.add(o) },
		UpdateFunc: func(_, o any) { events.add(o) },
		DeleteFunc: func(o any) { events.add(o) },
	}
	for _, obj := range []client.Object{&thinlvmv1.LogicalVolume{}, &corev1.Node{}, &thinlvmv1.LVMNode{}} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			t.Fatal(err)
		}
	}
	// Another node's LVMNode, and volumes made before the agent starts.
	if err := k8sClient.Create(ctx, &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: "far"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := k8sClient.Create(ctx, lv(fmt.Sprintf("far-before-%d", i), "far")); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	if err := k8sClient.Create(ctx, lv("near-0", "near")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "near-0 Ready", ready("near-0"))

	// The other node's volumes change while the agent watches: made,
	// changed, deleted; its Node and LVMNode change too.
	for i := range 5 {
		if err := k8sClient.Create(ctx, lv(fmt.Sprintf("far-after-%d", i), "far")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		far := &thinlvmv1.LogicalVolume{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Name: fmt.Sprintf("far-before-%d", i)}, far); err != nil {
			t.Fatal(err)
		}
		far.Labels = map[string]string{"changed": "yes"}
		if err := k8sClient.Update(ctx, far); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8sClient.Delete(ctx, &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: "far-after-0"}}); err != nil {
		t.Fatal(err)
	}
	farNode := &corev1.Node{}
	if err := k8sClient.Get(ctx, types.NamespacedName{Name: "far"}, farNode); err != nil {
		t.Fatal(err)
	}
	farNode.Labels = map[string]string{"changed": "yes"}
	if err := k8sClient.Update(ctx, farNode); err != nil {
		t.Fatal(err)
	}
	// A clone on this node of a volume on the other: the agent reads the
	// source past its cache, and refuses for want of a transfer endpoint,
	// not for want of the source.
	clone := lv("near-clone", "near")
	clone.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: "far-before-0"}
	if err := k8sClient.Create(ctx, clone); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "near-clone refused", func() bool {
		got := &thinlvmv1.LogicalVolume{}
		if k8sClient.Get(ctx, types.NamespacedName{Name: "near-clone"}, got) != nil {
			return false
		}
		c := meta.FindStatusCondition(got.Status.Conditions, thinlvmv1.ConditionReady)
		return c != nil && c.Reason != ""
	})
	got := &thinlvmv1.LogicalVolume{}
	if err := k8sClient.Get(ctx, types.NamespacedName{Name: "near-clone"}, got); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, thinlvmv1.ConditionReady); c.Reason != thinlvmv1.ReasonUnsupported {
		t.Errorf("clone of another node's volume: Ready %s/%s %q, want reason %s (the source read past the cache)", c.Status, c.Reason, c.Message, thinlvmv1.ReasonUnsupported)
	}
	// A last volume of this node: one watch stream delivers in order, so
	// once it is seen every earlier event that was sent has been too.
	if err := k8sClient.Create(ctx, lv("near-last", "near")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "near-last Ready", ready("near-last"))
	testutil.Eventually(t, "near-last's event", func() bool { return events.has("near-last") })

	if n := events.count("far"); n != 0 {
		t.Errorf("the agent of near received %d events of node far's objects, want 0", n)
	}
	if n := events.count("near"); n == 0 {
		t.Error("the agent of near received no event of its own objects")
	}
	cached := &thinlvmv1.LogicalVolumeList{}
	if err := mgr.GetCache().List(ctx, cached); err != nil {
		t.Fatal(err)
	}
	for _, l := range cached.Items {
		if l.Spec.NodeName != "near" {
			t.Errorf("the agent of near caches LogicalVolume %s of node %s", l.Name, l.Spec.NodeName)
		}
	}
	if len(cached.Items) != 3 {
		t.Errorf("the agent of near caches %d LogicalVolumes, want its 3", len(cached.Items))
	}
	for _, list := range []client.ObjectList{&corev1.NodeList{}, &thinlvmv1.LVMNodeList{}} {
		if err := mgr.GetCache().List(ctx, list); err != nil {
			t.Fatal(err)
		}
		if items, _ := meta.ExtractList(list); len(items) != 1 {
			t.Errorf("the agent of near caches %d %T items, want its own only", len(items), list)
		}
	}
	// The other node's volumes were never touched: no finalizer, no status.
	for _, name := range []string{"far-before-1", "far-after-1"} {
		far := &thinlvmv1.LogicalVolume{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Name: name}, far); err != nil {
			t.Fatal(err)
		}
		if len(far.Finalizers) != 0 || len(far.Status.Conditions) != 0 {
			t.Errorf("the agent of near touched %s of node far: finalizers %v, conditions %v", name, far.Finalizers, far.Status.Conditions)
		}
	}
}
