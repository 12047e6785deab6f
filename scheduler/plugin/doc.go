// Package plugin is the ThinLVM kube-scheduler plugin: it places pods whose
// unbound WaitForFirstConsumer claims use thinlvm by the room each node's
// LVMNode reports (less what it already promised to pods in flight), by where
// a clone's source lives, and by which nodes hold the golden bases the
// volumes are made from. It reads the API; it writes nothing.
package plugin
