package cluster

import "testing"

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
	for _, in := range []string{"--metrics-bind-address=:8080", "--http-endpoint=0.0.0.0:9808", "--secure-port=10259"} {
		got, err := freePorts(in)
		if err != nil || got == in {
			t.Errorf("freePorts(%q) = %q, %v", in, got, err)
		}
	}
	if got, _ := freePorts("--timeout=2m"); got != "--timeout=2m" {
		t.Errorf("freePorts changed %q", got)
	}
}
