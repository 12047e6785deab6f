package migration_test

import (
	"net"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// Where deploy/node projects the token a node agent presents to another's
// transfer endpoint, and its API token.
const (
	transferToken = "/var/run/secrets/thinlvm.io/transfer/token"
	apiToken      = "/var/run/secrets/kubernetes.io/serviceaccount/token"
)

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

// Each agent has its transfer token at the projected path: bound to its
// pod, so the TokenReview a transfer endpoint makes names the agent's
// ServiceAccount and node. Tokens are good for one audience only: the
// transfer token is no API credential, the API token no transfer one.
func TestTransferTokens(t *testing.T) {
	cs, err := kubernetes.NewForConfig(tb.Config)
	if err != nil {
		t.Fatal(err)
	}
	review := func(token string, audiences ...string) authenticationv1.TokenReviewStatus {
		t.Helper()
		tr, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status
	}
	for _, node := range []string{nodeA, nodeB} {
		t.Run(node, func(t *testing.T) {
			a := findAgent(t, node)
			token := strings.TrimSpace(a.file(t, transferToken))
			if token == "" {
				t.Fatalf("%s is empty", transferToken)
			}
			st := review(token, thinlvmv1.TransferAudience)
			if !st.Authenticated {
				t.Fatalf("transfer token not authenticated for %s: %s", thinlvmv1.TransferAudience, st.Error)
			}
			if want := "system:serviceaccount:" + cluster.Namespace + ":thinlvm-node"; st.User.Username != want {
				t.Errorf("user %q, want %q", st.User.Username, want)
			}
			if got := st.User.Extra["authentication.kubernetes.io/node-name"]; !slices.Equal(got, authenticationv1.ExtraValue{node}) {
				t.Errorf("node-name %q, want %q", got, node)
			}
			if !slices.Contains(st.Audiences, thinlvmv1.TransferAudience) {
				t.Errorf("audiences %q, want %s", st.Audiences, thinlvmv1.TransferAudience)
			}
			if st := review(token); st.Authenticated {
				t.Errorf("the transfer token is authenticated for the API server's audiences as %s", st.User.Username)
			}
			api := strings.TrimSpace(a.file(t, apiToken))
			if st := review(api); !st.Authenticated {
				t.Fatalf("the agent's API token is not authenticated: %s", st.Error)
			}
			if st := review(api, thinlvmv1.TransferAudience); st.Authenticated {
				t.Errorf("the agent's API token is authenticated for %s as %s", thinlvmv1.TransferAudience, st.User.Username)
			}
		})
	}
}
