// Package lvmd is the node agent's client of lvmd: the interface the agent's
// parts use, and Dial. It is the one seam where unit tests put a fake lvmd
// (package fake); it holds no logic of its own.
package lvmd
