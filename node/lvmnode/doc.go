// Package lvmnode publishes its node's LVMNode: it follows lvmd's capacity
// Watch stream and writes the LVMNode status only when something changed,
// at most once per interval. It writes no other object.
package lvmnode
