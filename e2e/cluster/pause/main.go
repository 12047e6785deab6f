// Command pause is the real test node's pod sandbox program (containerd's
// "pause" image): it holds the pod's namespaces, reaps the zombies its PID
// namespace hands it, and exits on SIGINT or SIGTERM. The upstream image
// is not reachable from here; this is its job, built from this tree.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
