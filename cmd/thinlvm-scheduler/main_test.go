package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	kubeschedulervalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"

	deployscheduler "github.com/thinlvm/thinlvm/deploy/scheduler"
	"github.com/thinlvm/thinlvm/scheduler/apis/config"
	"github.com/thinlvm/thinlvm/scheduler/plugin"
)

func load(t *testing.T, data []byte) *kubeschedulerconfig.KubeSchedulerConfiguration {
	t.Helper()
	obj, _, err := kubeschedulerscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, ok := obj.(*kubeschedulerconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded %T", obj)
	}
	return cfg
}

// The deploy/ configuration resolves to a profile with the plugin enabled
// at every extension point and typed, defaulted args.
func TestDeployedConfiguration(t *testing.T) {
	// go test runs in the package's directory (also when -trimpath, as
	// make test-minors builds, leaves no source path to find it by).
	data, err := deployscheduler.Profile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := load(t, data)
	if err := kubeschedulervalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatalf("kube-scheduler rejects the configuration: %v", err)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "thinlvm-scheduler" {
		t.Fatalf("profiles %+v", cfg.Profiles)
	}
	p := cfg.Profiles[0]
	enabled := false
	for _, pl := range p.Plugins.MultiPoint.Enabled {
		if pl.Name == plugin.Name && pl.Weight == 3 {
			enabled = true
		}
	}
	if !enabled {
		t.Errorf("ThinLVM not enabled with weight 3 in multiPoint: %+v", p.Plugins.MultiPoint.Enabled)
	}
	var args *config.ThinLVMArgs
	for _, pc := range p.PluginConfig {
		if pc.Name == plugin.Name {
			args, _ = pc.Args.(*config.ThinLVMArgs)
		}
	}
	want := &config.ThinLVMArgs{CapacityStrategy: config.LeastAllocated, CapacityWeight: 1, LocalityWeight: 2,
		ReservationTTL: metav1.Duration{Duration: 5 * time.Minute}}
	if d := cmp.Diff(want, args); d != "" {
		t.Errorf("args (-want +got):\n%s", d)
	}
	// The defaults of kube-scheduler stay: the profile lists in-tree
	// plugins too once defaulted (VolumeBinding among them).
	if len(p.PluginConfig) < 2 {
		t.Errorf("the profile lost kube-scheduler's default plugin config: %+v", p.PluginConfig)
	}
}

// Args left out are defaulted.
func TestArgsDefaults(t *testing.T) {
	cfg := load(t, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: x
  pluginConfig:
  - name: ThinLVM
    args:
      capacityStrategy: MostAllocated
      deviceClassWeights: {nvme: 3}
`))
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name != plugin.Name {
			continue
		}
		want := &config.ThinLVMArgs{DeviceClassWeights: map[string]int64{"nvme": 3}, CapacityStrategy: config.MostAllocated,
			CapacityWeight: 1, LocalityWeight: 2, ReservationTTL: metav1.Duration{Duration: 5 * time.Minute}}
		if d := cmp.Diff(want, pc.Args); d != "" {
			t.Errorf("args (-want +got):\n%s", d)
		}
		return
	}
	t.Fatal("no ThinLVM plugin config")
}
