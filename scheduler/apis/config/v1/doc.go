// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/thinlvm/thinlvm/scheduler/apis/config
// +k8s:defaulter-gen=TypeMeta

// Package v1 is the versioned ThinLVM plugin args of
// kubescheduler.config.k8s.io/v1, with their defaults and conversion to the
// internal type. No logic beyond defaulting and conversion; deepcopy,
// conversion and the defaulters' registration are generated (make
// generate), as kube-scheduler's and scheduler-plugins' args are.
package v1
