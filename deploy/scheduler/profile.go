// Package scheduler reads the scheduler profile deploy/ installs (this
// directory's scheduler-config.yaml, rendered from the chart), for the
// tests that run the plugin and the scheduler commands with it.
package scheduler

import (
	_ "embed"
	"errors"

	"sigs.k8s.io/yaml"
)

//go:embed scheduler-config.yaml
var configMap []byte

// Profile is the KubeSchedulerConfiguration of the installed ConfigMap.
func Profile() ([]byte, error) {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(configMap, &cm); err != nil {
		return nil, err
	}
	cfg, ok := cm.Data["scheduler-config.yaml"]
	if !ok {
		return nil, errors.New("deploy/scheduler/scheduler-config.yaml: no scheduler-config.yaml in its ConfigMap")
	}
	return []byte(cfg), nil
}
