// Package reconciler makes the LVs of its node's LogicalVolumes through lvmd:
// creates them (plain or thin snapshots), grows them, removes them behind a
// finalizer, and reports Ready and Failed conditions; once at start it
// removes the LVs whose LogicalVolume no longer exists. It reconciles only
// objects whose spec.nodeName is its node, talks to lvmd only through the
// lvmd.Client interface, and never touches an LV without its owner tag.
package reconciler
