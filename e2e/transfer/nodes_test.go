package transfer_test

import (
	"bytes"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// The audience of the token a node agent presents to another's transfer
// endpoint, and where deploy/node projects it.
const (
	transferAudience = "thinlvm.io/transfer"
	transferToken    = "/var/run/secrets/thinlvm.io/transfer/token"
	apiToken         = "/var/run/secrets/kubernetes.io/serviceaccount/token"
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
	for _, node := range []string{node1, node2} {
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
	for _, node := range []string{node1, node2} {
		t.Run(node, func(t *testing.T) {
			a := findAgent(t, node)
			token := strings.TrimSpace(a.file(t, transferToken))
			if token == "" {
				t.Fatalf("%s is empty", transferToken)
			}
			st := review(token, transferAudience)
			if !st.Authenticated {
				t.Fatalf("transfer token not authenticated for %s: %s", transferAudience, st.Error)
			}
			if want := "system:serviceaccount:" + cluster.Namespace + ":thinlvm-node"; st.User.Username != want {
				t.Errorf("user %q, want %q", st.User.Username, want)
			}
			if got := st.User.Extra["authentication.kubernetes.io/node-name"]; !slices.Equal(got, authenticationv1.ExtraValue{node}) {
				t.Errorf("node-name %q, want %q", got, node)
			}
			if !slices.Contains(st.Audiences, transferAudience) {
				t.Errorf("audiences %q, want %s", st.Audiences, transferAudience)
			}
			if st := review(token); st.Authenticated {
				t.Errorf("the transfer token is authenticated for the API server's audiences as %s", st.User.Username)
			}
			api := strings.TrimSpace(a.file(t, apiToken))
			if st := review(api); !st.Authenticated {
				t.Fatalf("the agent's API token is not authenticated: %s", st.Error)
			}
			if st := review(api, transferAudience); st.Authenticated {
				t.Errorf("the agent's API token is authenticated for %s as %s", transferAudience, st.User.Username)
			}
		})
	}
}

// Each VM reaches the other's transfer port at the address its agent
// advertises: guest, the host's loopback, the other VM's forward. While no
// agent serves it yet, a listener in the VM answers in its place.
func TestTransferPortsReachEachOther(t *testing.T) {
	for _, p := range []struct{ from, to string }{{node2, node1}, {node1, node2}} {
		t.Run(p.from+" to "+p.to, func(t *testing.T) {
			from, to := tb.VMs[p.from], tb.VMs[p.to]
			listening, err := to.Run(ctx, "netstat", "-ltn")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(listening, ":"+strconv.Itoa(lvmvm.TransferPort)+" ") {
				t.Skipf("something serves port %d on %s (the agent): the transfer tests reach it", lvmvm.TransferPort, p.to)
			}
			host, port, err := net.SplitHostPort(findAgent(t, p.to).flag(t, "transfer-advertise-address"))
			if err != nil {
				t.Fatal(err)
			}
			marker := "reached " + p.to
			name := "reach@" + p.to
			if err := to.Spawn(ctx, name, "/share/"+name+".log", "nc", "-l", "-p", strconv.Itoa(lvmvm.TransferPort), "-e", "echo", marker); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = to.Signal(ctx, name, syscall.SIGKILL, true) }() // gone already after one connection
			var got []byte
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				res, err := from.Exec(ctx, "timeout", "10", "nc", "-w", "5", host, port)
				if err != nil {
					t.Fatal(err)
				}
				if got = bytes.TrimSpace(res.Stdout); string(got) == marker {
					return
				}
			}
			t.Errorf("%s dialing %s:%s got %q, want %q", p.from, host, port, got, marker)
		})
	}
}
