// Package topolvm benchmarks thinlvm's lvmd (both lvm runners) beside
// TopoLVM's lvmd and the bare lvm commands, in one boot of the real-LVM test
// VM. It is a Go module of its own so that the product's go.mod never
// requires TopoLVM; it holds no product code and nothing imports it.
package topolvm
