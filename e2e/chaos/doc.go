// Package chaos is the fault suite: a storm of volume operations on the
// local cluster (thinlvm installed from deploy/, the real-LVM VM node and
// simulated nodes) while a chaos loop SIGKILLs thinlvm's components, the
// CSI sidecars and the scheduler, and restarts etcd and the API server
// once. Afterwards it checks what a user relies on: no orphan LV, no lost
// data, nothing stuck, no scheduler reservation left (docs/reliability.md).
//
// `go test ./e2e/chaos/` runs the CI size; `-chaos.seed=N` replays a
// storm's schedule; BenchmarkStorm (make bench) runs the large size.
package chaos
