package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRemap(t *testing.T) {
	mounts := map[string]string{"/csi": "/tmp/p/csi", "/dev": "/tmp/n/root/dev", "/run/thinlvm": "/tmp/n/root/run/thinlvm", "/run": "/x"}
	for in, want := range map[string]string{
		"--csi-address=unix:///csi/csi.sock":           "--csi-address=unix:///tmp/p/csi/csi.sock",
		"--csi-address=/csi/csi.sock":                  "--csi-address=/tmp/p/csi/csi.sock",
		"--lvmd-address=unix:///run/thinlvm/lvmd.sock": "--lvmd-address=unix:///tmp/n/root/run/thinlvm/lvmd.sock",
		"/dev":                "/tmp/n/root/dev",
		"--device=/devices/x": "--device=/devices/x",
		"--path=/csix/y":      "--path=/csix/y",
		"--a=/run/other":      "--a=/x/other",
	} {
		if got := remap(in, mounts); got != want {
			t.Errorf("remap(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExpandAndPorts(t *testing.T) {
	if got := expand("--ns=$(NAMESPACE) $(MISSING)", map[string]string{"NAMESPACE": "thinlvm-system"}); got != "--ns=thinlvm-system $(MISSING)" {
		t.Errorf("expand: %q", got)
	}
	for _, in := range []string{"--metrics-bind-address=:8080", "--http-endpoint=0.0.0.0:9808", "--secure-port=10259", "--transfer-address=:9443"} {
		got, err := freePorts(in)
		if err != nil || got == in {
			t.Errorf("freePorts(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"--timeout=2m", "--transfer-advertise-address=10.0.2.2:40123"} {
		if got, _ := freePorts(in); got != in {
			t.Errorf("freePorts changed %q", got)
		}
	}
}

func TestContainerEnv(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	ct := corev1.Container{Env: []corev1.EnvVar{field("NODE_NAME", "spec.nodeName"), field("POD_IP", "status.podIP"),
		field("HOST_IP", "status.hostIP"), field("NS", "metadata.namespace"), {Name: "ADDR", Value: "$(POD_IP):9443"}}}
	got, err := containerEnv(pod, ct, "10.0.2.15")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"NODE_NAME": "n1", "POD_IP": "10.0.2.15", "HOST_IP": "10.0.2.15", "NS": "ns", "ADDR": "10.0.2.15:9443"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	ct.Env = []corev1.EnvVar{field("X", "status.podIPs")}
	if _, err := containerEnv(pod, ct, "127.0.0.1"); err == nil {
		t.Error("an unsupported field was resolved")
	}
}

func TestVolumeField(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"b": "2", "a": "1"}}}
	for path, want := range map[string]string{"metadata.namespace": "ns", "metadata.name": "p", "metadata.labels": "a=\"1\"\nb=\"2\""} {
		if got, err := volumeField(pod, path); err != nil || got != want {
			t.Errorf("volumeField(%s) = %q, %v, want %q", path, got, err, want)
		}
	}
}
