// Package lvm is lvmd's one boundary to lvm2: it runs lvm commands (and
// dmsetup and thin_delta on thin pools) through a Runner, parses their JSON
// reports and thin_delta's XML into typed values and turns their outcomes
// into sentinel errors. It validates every name before building a command and
// never runs anything through a shell, nor kills an lvm command it started. It
// knows nothing of gRPC or Kubernetes.
package lvm
