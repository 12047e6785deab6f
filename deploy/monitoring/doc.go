// Package monitoring holds the tests of deploy/monitoring: the alerts
// under promtool, and that the rules, the dashboard and the PodMonitors
// name what thinlvm serves.
package monitoring
