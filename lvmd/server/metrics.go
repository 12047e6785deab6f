package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
)

const (
	namespace = "thinlvm"
	subsystem = "lvmd"
)

// Metrics are lvmd's Prometheus metrics.
type Metrics struct {
	rpcDuration   *prometheus.HistogramVec
	rpcErrors     *prometheus.CounterVec
	lvmCommands   *prometheus.CounterVec
	lvmDuration   *prometheus.HistogramVec
	shellStarts   prometheus.Counter
	vgSize        *prometheus.GaugeVec
	vgFree        *prometheus.GaugeVec
	poolSize      *prometheus.GaugeVec
	poolData      *prometheus.GaugeVec
	poolMeta      *prometheus.GaugeVec
	virtualBytes  *prometheus.GaugeVec
	availableByte *prometheus.GaugeVec
	available     *prometheus.GaugeVec
	lvCount       *prometheus.GaugeVec
	overHighWater *prometheus.GaugeVec
	poolHealth    *prometheus.GaugeVec
	vgMetaSize    *prometheus.GaugeVec
	vgMetaFree    *prometheus.GaugeVec
	vgMetaLVsLeft *prometheus.GaugeVec
	generation    prometheus.Gauge
}

// poolHealthStates are the state label values of thinpool_health: one
// series per state, 1 for the pool's.
var poolHealthStates = []struct {
	label  string
	health lvm.PoolHealth
}{
	{"ok", lvm.PoolHealthy},
	{"out_of_data_space", lvm.PoolOutOfDataSpace},
	{"metadata_read_only", lvm.PoolMetadataReadOnly},
	{"failed", lvm.PoolFailed},
}

// NewMetrics creates lvmd's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	class := []string{"device_class"}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help}, class)
	}
	m := &Metrics{
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "rpc_duration_seconds",
			Help: "Latency of lvmd's gRPC calls.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"method"}),
		rpcErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "rpc_errors_total",
			Help: "gRPC calls that failed, by method and status code.",
		}, []string{"method", "code"}),
		lvmCommands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "lvm_commands_total",
			Help: "lvm commands lvmd ran, by subcommand (dmsetup and thin_delta by their names) and result: each one a process of its own with --lvm-runner=exec, a line to the lvm shell with --lvm-runner=shell (dmsetup and thin_delta are always processes).",
		}, []string{"command", "result"}),
		lvmDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "lvm_command_duration_seconds",
			Help: "Run time of lvm commands, by subcommand (dmsetup and thin_delta by their names).", Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}, []string{"command"}),
		shellStarts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "lvm_shell_starts_total",
			Help: "lvm shell processes lvmd started (--lvm-runner=shell): the first, one after each that died, and one every --lvm-shell-max-commands.",
		}),
		vgSize:        gauge("vg_size_bytes", "Size of the device class's volume group."),
		vgFree:        gauge("vg_free_bytes", "Free space of the device class's volume group."),
		available:     gauge("device_class_available", "1 while the device class serves volumes, 0 while its volume group or thin pool is missing on this node (its LVMNode's Ready condition says which)."),
		poolSize:      gauge("thinpool_size_bytes", "Size of the device class's thin pool."),
		poolData:      gauge("thinpool_data_percent", "Data use of the thin pool, in percent."),
		poolMeta:      gauge("thinpool_metadata_percent", "Metadata use of the thin pool, in percent."),
		virtualBytes:  gauge("thinpool_virtual_bytes", "Sum of the sizes of the thin LVs in the pool."),
		availableByte: gauge("available_bytes", "Largest new volume the device class accepts now."),
		lvCount:       gauge("lvs", "Number of thinlvm LVs in the device class."),
		overHighWater: gauge("thinpool_over_high_watermark",
			"1 while the thin pool's data or metadata use is over the device class's high-water mark: new volumes are refused."),
		poolHealth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "thinpool_health",
			Help: "1 for the thin pool's state (ok, out_of_data_space, metadata_read_only, failed), 0 for the others.",
		}, []string{"device_class", "state"}),
		vgMetaSize: gauge("vg_metadata_size_bytes",
			"Size of the device class's volume group metadata area (vg_mda_size, set by pvcreate --metadatasize)."),
		vgMetaFree: gauge("vg_metadata_free_bytes",
			"How much the volume group's metadata can still grow (vg_mda_free); each LV adds about 400 bytes."),
		vgMetaLVsLeft: gauge("vg_metadata_lvs_left",
			"How many more LVs lvmd creates in the device class's volume group before its metadata area is full; at 0 new volumes are refused."),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "report_generation",
			Help: "Generation of the published lvm report.",
		}),
	}
	reg.MustRegister(m.rpcDuration, m.rpcErrors, m.lvmCommands, m.lvmDuration, m.shellStarts, m.vgSize, m.vgFree,
		m.poolSize, m.poolData, m.poolMeta, m.virtualBytes, m.availableByte, m.available, m.lvCount, m.overHighWater, m.poolHealth,
		m.vgMetaSize, m.vgMetaFree, m.vgMetaLVsLeft, m.generation)
	return m
}

// ObserveShellStart records one lvm shell process; it fits
// lvm.ShellRunner.OnStart.
func (m *Metrics) ObserveShellStart() { m.shellStarts.Inc() }

// ObserveLVMCommand records one lvm command; it fits lvm.ExecRunner.OnRun
// and lvm.ShellRunner.OnRun.
func (m *Metrics) ObserveLVMCommand(command string, seconds float64, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.lvmCommands.WithLabelValues(command, result).Inc()
	m.lvmDuration.WithLabelValues(command).Observe(seconds)
}
