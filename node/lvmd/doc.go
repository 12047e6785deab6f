// Package lvmd is the node agent's client of lvmd: the interface the agent's
// parts use, and Dial. It holds no logic of its own: unit tests put the real
// lvmd behind the interface, in memory on the simulated lvm (lvmd/lvmdtest).
package lvmd
