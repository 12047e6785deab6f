// Package reconciler makes the LVs of its node's LogicalVolumes through lvmd:
// creates them (plain or thin snapshots), grows them, removes them behind a
// finalizer, and reports Ready and Failed conditions. It reconciles only
// objects whose spec.nodeName is its node and talks to lvmd only through the
// lvmd.Client interface.
package reconciler
