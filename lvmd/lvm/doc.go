// Package lvm is lvmd's one boundary to lvm2: it runs lvm commands through a
// Runner, parses their JSON reports into typed values and turns their outcomes
// into sentinel errors. It validates every name before building a command and
// never runs anything through a shell, nor kills an lvm command it started. It
// knows nothing of gRPC or Kubernetes.
package lvm
