// +k8s:deepcopy-gen=package

// Package config holds the internal type of the ThinLVM scheduler plugin's
// arguments, as kube-scheduler's own plugin args are kept: versioned types
// (v1) are defaulted and converted into it, validation checks it. No logic;
// its deepcopy is generated (make generate).
package config
