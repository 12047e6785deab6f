package transfer_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// The two real-LVM nodes, each its own VM.
const (
	node1 = cluster.VMNode
	node2 = "vm-node-2"
)

var (
	tb  *cluster.Testbed
	ctx = context.Background()
)

// TestMain starts the control plane, thinlvm and the two VM nodes (no
// simulated node).
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	start, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	began := time.Now()
	var err error
	tb, err = cluster.StartTestbed(start, cluster.TestbedOptions{Log: os.Stderr, VMNodes: []string{node1, node2}, VMDisk: "8G", Pool: "4G"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	defer tb.Stop()
	fmt.Fprintf(os.Stderr, "testbed with two VM nodes ready in %.0fs\n", time.Since(began).Seconds())
	code := m.Run()
	if code != 0 {
		tb.DumpLogs(os.Stderr)
	}
	return code
}
