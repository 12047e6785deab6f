// Command kubectl-thinlvm is kubectl's thinlvm plugin (`kubectl thinlvm`,
// found on the PATH by its name): what thinlvm holds on each node, each
// claim's volume and where it came from, and the golden images' spread.
// It reads the API server with the user's kubeconfig, as kubectl does.
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func main() {
	cmd := newRootCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
