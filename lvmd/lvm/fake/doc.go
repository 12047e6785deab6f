// Package fake is an in-memory lvm.Runner for tests: it simulates the volume
// groups, thin pools and thin LVs that lvm2 would hold and answers exactly
// the commands lvm.Client builds, with lvm2's JSON reports and stderr. It
// records every call, can be told to fail, and can be held in the middle of
// a command (OnRun) as a slow lvm would be. It runs no process.
package fake
