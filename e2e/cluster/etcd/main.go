// Command etcd is etcd's server, built from the Go module proxy for the
// project's tests (envtest and the local control plane).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
