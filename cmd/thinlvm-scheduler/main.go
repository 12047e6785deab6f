// Command thinlvm-scheduler is kube-scheduler with the ThinLVM plugin
// registered; its args are typed, defaulted and validated like the in-tree
// plugins'.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	_ "github.com/thinlvm/thinlvm/scheduler/apis/config/scheme" // registers ThinLVMArgs
	"github.com/thinlvm/thinlvm/scheduler/plugin"
)

func main() {
	cmd := app.NewSchedulerCommand(app.WithPlugin(plugin.Name, plugin.New))
	os.Exit(cli.Run(cmd))
}
