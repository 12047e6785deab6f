package migration_test

import (
	"net"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// Where the node agent's API token is projected.
const apiToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// agent is the node agent's process in a VM, as the guest sees it.
type agent struct {
	vm   *lvmvm.VM
	proc string // /proc/<pid>
}

func findAgent(t *testing.T, node string) agent {
	t.Helper()
	vm := tb.VMs[node]
	out, err := vm.Run(ctx, "pidof", "thinlvm-node")
	if err != nil {
		t.Fatalf("agent of %s: %v", node, err)
	}
	pids := strings.Fields(out)
	if len(pids) != 1 {
		t.Fatalf("agent of %s: pids %q, want one", node, pids)
	}
	return agent{vm: vm, proc: "/proc/" + pids[0]}
}

// file reads a file as the agent's container sees it.
func (a agent) file(t *testing.T, path string) string {
	t.Helper()
	out, err := a.vm.Run(ctx, "cat", a.proc+"/root"+path)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// list is a NUL-separated /proc file of the agent (cmdline, environ).
func (a agent) list(t *testing.T, name string) []string {
	t.Helper()
	out, err := a.vm.Run(ctx, "cat", a.proc+"/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
}

// flag is the last value of --name= in the agent's args.
func (a agent) flag(t *testing.T, name string) string {
	t.Helper()
	var v string
	for _, arg := range a.list(t, "cmdline") {
		if val, ok := strings.CutPrefix(arg, "--"+name+"="); ok {
			v = val
		}
	}
	return v
}

// Both real-LVM nodes run: each reports its own thin pool, and its agent
// runs with the DaemonSet's transfer settings, its address the VM's own,
// and advertises the host port forwarded to its endpoint.
func TestTwoVMNodes(t *testing.T) {
	for _, node := range []string{nodeA, nodeB} {
		t.Run(node, func(t *testing.T) {
			ln := &thinlvmv1.LVMNode{}
			if err := tb.Client.Get(ctx, types.NamespacedName{Name: node}, ln); err != nil {
				t.Fatal(err)
			}
			if len(ln.Status.DeviceClasses) == 0 || ln.Status.DeviceClasses[0].PoolSize.IsZero() || ln.Status.DeviceClasses[0].ThinPool != "pool0" {
				t.Errorf("LVMNode %s: device classes %+v, want vg0/pool0 with its size", node, ln.Status.DeviceClasses)
			}
			if err := tb.WaitCapacity(ctx, node); err != nil {
				t.Error(err)
			}
			a := findAgent(t, node)
			if got := a.flag(t, "transfer-address"); got != ":9443" {
				t.Errorf("--transfer-address=%q, want :9443 (the DaemonSet's, untouched in the VM)", got)
			}
			_, port, _ := net.SplitHostPort(tb.VMs[node].Addr(lvmvm.TransferPort))
			if got, want := a.flag(t, "transfer-advertise-address"), net.JoinHostPort(lvmvm.HostAddress, port); got != want {
				t.Errorf("--transfer-advertise-address=%q, want %q", got, want)
			}
			if env := a.list(t, "environ"); !slices.Contains(env, "POD_IP="+lvmvm.GuestAddress) {
				t.Errorf("agent's environment %q has no POD_IP=%s", env, lvmvm.GuestAddress)
			}
			if ep := ln.Status.Transfer; ep == nil || ep.Address != net.JoinHostPort(lvmvm.HostAddress, port) || len(ep.CertificateSHA256) != 64 {
				t.Errorf("LVMNode %s publishes transfer endpoint %+v, want %s:%s with a certificate hash", node, ep, lvmvm.HostAddress, port)
			}
		})
	}
}

// A node agent's identity at other nodes' transfer endpoints is the key
// whose certificate its LVMNode pins (no transfer token is projected any
// more), and only that node's agent may write that LVMNode. With its own
// API token, read as the agent's container sees it, the agent of nodeA may
// not pin a certificate in nodeB's LVMNode, take or make a Lease other
// than an origin download's (the controller's leader election among them),
// or report an Event as another component or about another node; a
// ServiceAccount of the same name in another namespace may write no
// LVMNode at all.
func TestNodeAgentIdentity(t *testing.T) {
	a := findAgent(t, nodeA)
	if out, err := a.vm.Run(ctx, "test", "-e", a.proc+"/root/var/run/secrets/thinlvm.io/transfer"); err == nil {
		t.Errorf("the agent still has a projected transfer token (%s)", out)
	}
	as := func(t *testing.T, token string) client.Client {
		t.Helper()
		cfg := rest.AnonymousClientConfig(tb.Config)
		cfg.BearerToken = token
		c, err := client.New(cfg, client.Options{Scheme: cluster.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	agentA := as(t, strings.TrimSpace(a.file(t, apiToken)))
	forbidden := func(t *testing.T, what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}

	t.Run("another node's LVMNode", func(t *testing.T) {
		ln := &thinlvmv1.LVMNode{}
		if err := tb.Client.Get(ctx, types.NamespacedName{Name: nodeB}, ln); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(ln.DeepCopy())
		ln.Status.Transfer = &thinlvmv1.TransferEndpoint{Address: "127.0.0.1:9443", CertificateSHA256: strings.Repeat("0", 64)}
		forbidden(t, "pin a certificate in "+nodeB+"'s LVMNode as "+nodeA+"'s agent", agentA.Status().Patch(ctx, ln, patch))
	})
	t.Run("leases", func(t *testing.T) {
		leases := &coordinationv1.LeaseList{}
		if err := tb.Client.List(ctx, leases, client.InNamespace(cluster.Namespace)); err != nil {
			t.Fatal(err)
		}
		var election *coordinationv1.Lease
		for i := range leases.Items {
			if !strings.HasPrefix(leases.Items[i].Name, "thinlvm-origin-") {
				election = &leases.Items[i]
				break
			}
		}
		if election == nil {
			t.Fatalf("no leader-election Lease in %s: %d Leases", cluster.Namespace, len(leases.Items))
		}
		election.Spec.HolderIdentity = ptr.To(nodeA)
		forbidden(t, "take Lease "+election.Name, agentA.Update(ctx, election))
		made := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: "thinlvm-controller-by-agent"}}
		forbidden(t, "make Lease "+made.Name, agentA.Create(ctx, made))
		origin := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: "thinlvm-origin-identity-test"}}
		if err := agentA.Create(ctx, origin); err != nil {
			t.Fatalf("an origin download's Lease: %v, want it made", err)
		}
		if err := agentA.Delete(ctx, origin); err != nil {
			t.Error(err)
		}
	})
	t.Run("events", func(t *testing.T) {
		event := func(name, controller, kind, regarding string) *eventsv1.Event {
			return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, EventTime: metav1.NowMicro(),
				ReportingController: controller, ReportingInstance: controller + "-test", Action: "Test", Reason: "Test", Type: corev1.EventTypeNormal,
				Regarding: corev1.ObjectReference{APIVersion: thinlvmv1.GroupVersion.String(), Kind: kind, Name: regarding}}
		}
		forbidden(t, "an Event about "+nodeB+"'s LVMNode", agentA.Create(ctx, event("identity-other-node", "thinlvm-node", "LVMNode", nodeB)))
		forbidden(t, "an Event as the controller", agentA.Create(ctx, event("identity-as-controller", "thinlvm-controller", "LVMNode", nodeA)))
		own := event("identity-own-node", "thinlvm-node", "LVMNode", nodeA)
		if err := agentA.Create(ctx, own); err != nil {
			t.Errorf("an Event about its own LVMNode: %v, want it made", err)
		}
	})
	t.Run("same-named ServiceAccount of another namespace", func(t *testing.T) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "identity-tenant"}}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "thinlvm-node"}}
		for _, o := range []client.Object{ns, sa} {
			if err := tb.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		cs, err := kubernetes.NewForConfig(tb.Config)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tenant := as(t, tr.Status.Token)
		ln := &thinlvmv1.LVMNode{}
		if err := tb.Client.Get(ctx, types.NamespacedName{Name: nodeA}, ln); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(ln.DeepCopy())
		ln.Status.Transfer = &thinlvmv1.TransferEndpoint{Address: "127.0.0.1:9443", CertificateSHA256: strings.Repeat("1", 64)}
		forbidden(t, "pin a certificate in "+nodeA+"'s LVMNode as "+ns.Name+"/thinlvm-node", tenant.Status().Patch(ctx, ln, patch))
		if err := tb.Client.Delete(ctx, ns); err != nil {
			t.Error(err)
		}
	})
}
