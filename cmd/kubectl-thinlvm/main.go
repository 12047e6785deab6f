// Command kubectl-thinlvm is kubectl's thinlvm plugin (`kubectl thinlvm`,
// found on the PATH by its name): what thinlvm holds on each node, each
// claim's volume and where it came from, and the golden images' spread;
// and the day-two commands that move a claim's volume to another node
// (move) and empty a node (evacuate). It talks to the API server with the
// user's kubeconfig, as kubectl does.
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// What the plugin reads, and all it may: `make generate` writes the
// read-only ClusterRole thinlvm-viewer from these markers
// (deploy/rbac/viewer), which an administrator binds to the plugin's users.
// +kubebuilder:rbac:groups=thinlvm.io,resources=lvmnodes;logicalvolumes;goldenimages;goldenimagechannels,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumes;persistentvolumeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch

func main() {
	cmd := newRootCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
