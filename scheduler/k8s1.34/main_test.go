package main

import (
	"testing"

	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	kubeschedulervalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	pluginsconfig "sigs.k8s.io/scheduler-plugins/apis/config"

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
	if err := kubeschedulervalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatalf("kube-scheduler rejects the configuration: %v", err)
	}
	return cfg
}

// deploy/'s profile is this build's too: the same file decodes to the
// same typed args as with the other minors' builds.
func TestDeployedConfiguration(t *testing.T) {
	data, err := deployscheduler.Profile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := load(t, data)
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "thinlvm-scheduler" {
		t.Fatalf("profiles %+v", cfg.Profiles)
	}
	found := false
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == plugin.Name {
			args, ok := pc.Args.(*config.ThinLVMArgs)
			found = ok && args.CapacityStrategy == config.LeastAllocated && args.LocalityWeight == 2
		}
	}
	if !found {
		t.Errorf("no defaulted ThinLVMArgs in %+v", cfg.Profiles[0].PluginConfig)
	}
}

// A scheduler-plugins user adds ThinLVM to the profile that already
// enables Coscheduling: both are registered, both args decode typed.
func TestThinLVMBesideSchedulerPlugins(t *testing.T) {
	for _, name := range []string{plugin.Name, "Coscheduling", "CapacityScheduling", "NodeResourceTopologyMatch"} {
		if plugins[name] == nil {
			t.Errorf("plugin %s is not registered", name)
		}
	}
	cfg := load(t, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: scheduler-plugins-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: Coscheduling
      - name: ThinLVM
        weight: 3
  pluginConfig:
  - name: Coscheduling
    args: {permitWaitingTimeSeconds: 10}
  - name: ThinLVM
    args: {capacityStrategy: MostAllocated}
`))
	var thin, cos bool
	for _, pc := range cfg.Profiles[0].PluginConfig {
		switch args := pc.Args.(type) {
		case *config.ThinLVMArgs:
			thin = args.CapacityStrategy == config.MostAllocated && args.CapacityWeight == 1
		case *pluginsconfig.CoschedulingArgs:
			cos = args.PermitWaitingTimeSeconds == 10
		}
	}
	if !thin || !cos {
		t.Errorf("args not decoded and defaulted (ThinLVM %v, Coscheduling %v): %+v", thin, cos, cfg.Profiles[0].PluginConfig)
	}
}
