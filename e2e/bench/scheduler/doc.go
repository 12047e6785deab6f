// Package schedbench measures the scheduling throughput of thinlvm-scheduler
// with and without the ThinLVM plugin, scheduler_perf style: a real API
// server (envtest), node and claim objects made by the benchmark, no kwok
// and no provisioner. It is a benchmark only.
package schedbench
