// Package golden keeps a node's golden bases: for each GoldenImage that a
// LogicalVolume on the node is made from (or whose prewarm selector matches
// the node) it populates one thin LV, once: from the image's HTTP source or
// OCI registry through node/diskimage (with Credentials: the Secrets and
// ConfigMaps of the agent's namespace labelled for images), from another
// node's base, or from a volume. A populated base is sealed read-only and
// inactive; every volume made from it is a thin snapshot. Progress and
// state go to the LVMNode's status and to Events on the GoldenImage; a
// failed population leaves no base.
package golden
