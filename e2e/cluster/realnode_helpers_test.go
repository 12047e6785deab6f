package cluster_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// workload is a pod on the real node running script (busybox sh) with the
// claims at /v0, /v1, ... (devices there, with block).
func workload(name string, block bool, script string, claims ...string) *corev1.Pod {
	pod := cluster.Pod(name, block, onNode(vmNode), claims...)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(1))
	c := &pod.Spec.Containers[0]
	c.Image = cluster.BusyboxImage
	c.Command = []string{"/bin/sh", "-c", script}
	return pod
}

// startPod creates pod and waits until it runs (every container ready).
func startPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if err := k.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(t, pod) })
	waitRunning(t, pod)
	return pod
}

// waitRunning waits until pod runs with every container ready.
func waitRunning(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	err := k.WaitFor(ctx, "pod "+pod.Name+" to run", 5*time.Minute, func() (bool, error) {
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod %s ended: %s", pod.Name, pod.Status.Phase)
		}
		if pod.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if !cs.Ready {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v; status %+v; events %s%s", err, pod.Status, events(pod), guestState())
	}
}

// runPod runs script in a pod on the real node (restartPolicy Never),
// waits for it to succeed, deletes it and returns what it printed (its
// termination message).
func runPod(t *testing.T, name string, block bool, script string, claims ...string) string {
	t.Helper()
	out, err := tryPod(t, workload(name, block, script, claims...))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryPod runs pod to its end and returns its output, and an error when it
// failed.
func tryPod(t *testing.T, pod *corev1.Pod) (string, error) {
	t.Helper()
	ctx := context.Background()
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	c := &pod.Spec.Containers[0]
	c.Command[len(c.Command)-1] = "(" + c.Command[len(c.Command)-1] + ") > /dev/termination-log 2>&1"
	if err := k.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	defer deletePod(t, pod)
	var out string
	var failed error
	err := k.WaitFor(ctx, "pod "+pod.Name+" to finish", 5*time.Minute, func() (bool, error) {
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.State.Terminated != nil {
				out = strings.TrimSpace(cs.State.Terminated.Message)
			}
		}
		switch pod.Status.Phase {
		case corev1.PodSucceeded:
			return true, nil
		case corev1.PodFailed:
			failed = fmt.Errorf("pod %s failed: %s", pod.Name, out)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v; status %+v; events %s%s", err, pod.Status, events(pod), guestState())
	}
	return out, failed
}

// podLog is what the pod's container printed, read from the node as the
// kubelet wrote it (/var/log/pods, the CRI log format), as kubectl logs
// would show it.
func podLog(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	log, err := cluster.RealNodePodLog(context.Background(), vm, pod, "")
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// lastPrinted is the last line of log starting with prefix, without it
// ("" if none).
func lastPrinted(log, prefix string) string {
	got := ""
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, prefix) {
			got = strings.TrimPrefix(l, prefix)
		}
	}
	return got
}

// lastLine waits until pod's log has a line starting with prefix that
// cond accepts, and returns the last such line (without the prefix).
func lastLine(t *testing.T, pod *corev1.Pod, prefix string, cond func(string) bool) string {
	t.Helper()
	var got string
	err := k.WaitFor(context.Background(), "pod "+pod.Name+" to print "+prefix, 3*time.Minute, func() (bool, error) {
		got = lastPrinted(podLog(t, pod), prefix)
		return got != "" && cond(got), nil
	})
	if err != nil {
		t.Fatalf("%v; last %q%s", err, got, guestState())
	}
	return got
}

func deletePod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	if err := client.IgnoreNotFound(k.Client.Delete(ctx, pod)); err != nil {
		t.Error(err)
	}
	gone(t, pod)
}

func deleteClaim(t *testing.T, claim *corev1.PersistentVolumeClaim) {
	t.Helper()
	ctx := context.Background()
	if err := client.IgnoreNotFound(k.Client.Delete(ctx, claim)); err != nil {
		t.Error(err)
	}
	if err := k.WaitGone(ctx, 3*time.Minute, claim); err != nil {
		t.Error(err)
	}
}

// newClaim creates a claim, deleted (and waited for) when the test ends.
func newClaim(t *testing.T, name, class, size string, block bool) *corev1.PersistentVolumeClaim {
	t.Helper()
	claim := cluster.Claim(name, class, size, block)
	if err := k.Client.Create(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteClaim(t, claim) })
	return claim
}

// growClaim asks for the claim to grow to size.
func growClaim(t *testing.T, name, size string) {
	t.Helper()
	claim := &corev1.PersistentVolumeClaim{}
	if err := k.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, claim); err != nil {
		t.Fatal(err)
	}
	claim.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(size)
	if err := k.Client.Update(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
}

// waitGrown waits for the claim to report size with no resize condition
// or resize status left: the controller's and the node's expansion are
// both done. (Other conditions stay: Unused, PodUsingPVC, while a pod
// uses the claim.)
func waitGrown(t *testing.T, name, size string) {
	t.Helper()
	ctx := context.Background()
	claim := &corev1.PersistentVolumeClaim{}
	err := k.WaitFor(ctx, "claim "+name+" to report "+size, 3*time.Minute, func() (bool, error) {
		err := k.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, claim)
		if err != nil || claim.Status.Capacity.Storage().Cmp(resource.MustParse(size)) != 0 || len(claim.Status.AllocatedResourceStatuses) > 0 {
			return false, err
		}
		return !slices.ContainsFunc(claim.Status.Conditions, func(c corev1.PersistentVolumeClaimCondition) bool {
			return resizeConditions[c.Type]
		}), nil
	})
	if err != nil {
		t.Errorf("%v: %+v", err, claim.Status)
	}
}

// resizeConditions are a claim's conditions while it grows or failed to.
var resizeConditions = map[corev1.PersistentVolumeClaimConditionType]bool{
	corev1.PersistentVolumeClaimResizing: true, corev1.PersistentVolumeClaimFileSystemResizePending: true,
	corev1.PersistentVolumeClaimControllerResizeError: true, corev1.PersistentVolumeClaimNodeResizeError: true,
}

// mounts counts the node's mounts whose line in /proc/mounts names the
// claim's PV: the kubelet's publish paths all do.
func mounts(t *testing.T, claim string) int {
	t.Helper()
	ctx := context.Background()
	pvc := &corev1.PersistentVolumeClaim{}
	if err := k.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: claim}, pvc); err != nil {
		t.Fatal(err)
	}
	if pvc.Spec.VolumeName == "" {
		t.Fatalf("claim %s is not bound", claim)
	}
	out, err := vm.Run(ctx, "cat", "/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(out, "/"+pvc.Spec.VolumeName+"/")
}

// kubeletMetrics reads the kubelet's /metrics through its forwarded port,
// authenticated with the cluster admin's token (the kubelet checks it with
// a TokenReview and a SubjectAccessReview, webhook mode).
func kubeletMetrics(t *testing.T) string {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the kubelet's self-signed serving certificate
	req, _ := http.NewRequest(http.MethodGet, "https://"+vm.Addr(cluster.KubeletPort)+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+k.Config.BearerToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("kubelet /metrics: %s: %s", resp.Status, body)
	}
	return string(body)
}

// events lists the events of obj, for failure messages.
func events(pod *corev1.Pod) string {
	list := &corev1.EventList{}
	if err := k.Client.List(context.Background(), list, client.InNamespace(pod.Namespace)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range list.Items {
		if e.InvolvedObject.Name == pod.Name {
			fmt.Fprintf(&b, "\n  %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}

// guestScript prints, for a failure message, what the node is doing: every
// process (not kernel threads) with its state and what it waits in, the
// kernel stack of each task in uninterruptible sleep (D), containerd's
// tasks, the device-mapper tables' state, the LVs and the kernel's last
// messages. A pod that never ends is then explained by the CI log alone.
const guestScript = `for p in /proc/[0-9]*; do
  st=$(sed -n 's/^State:[[:space:]]*//p' $p/status 2>/dev/null) || continue
  cmd=$(tr '\0\n' '  ' < $p/cmdline 2>/dev/null | cut -c1-160)
  case "$st" in
    D*) echo "${p#/proc/} [$st] $(cat $p/wchan) $cmd"; sed 's/^/    /' $p/stack 2>/dev/null;;
    *) [ -z "$cmd" ] || echo "${p#/proc/} [$st] $(cat $p/wchan 2>/dev/null) $cmd";;
  esac
done
echo "== containerd's tasks"; timeout 60 /usr/local/bin/ctr --address /run/containerd/containerd.sock -n k8s.io task ls 2>&1
echo "== dmsetup info"; dmsetup info -c 2>&1
echo "== dmsetup status"; dmsetup status 2>&1
echo "== lvs"; lvm lvs -a -o lv_name,lv_attr,lv_size,data_percent,metadata_percent 2>&1
echo "== mounts"; grep -c . /proc/self/mountinfo
echo "== free"; free -m 2>&1
echo "== dmesg"; dmesg 2>&1 | tail -30
`

// guestState is guestScript's output, or why it could not be had (the
// guest may not answer).
func guestState() string {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := vm.Run(ctx, "sh", "-c", guestScript)
	if err != nil {
		return fmt.Sprintf("\n=== the node's state: %v\n%s", err, out)
	}
	return "\n=== the node's state\n" + out
}

func podPhases(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+"="+string(p.Status.Phase))
	}
	return out
}
