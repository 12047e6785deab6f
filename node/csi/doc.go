// Package csi is thinlvm's CSI Identity and Node services: it publishes LVs
// that lvmd made (mkfs and mount for Filesystem volumes, a bind mount of the
// device for Block), grows filesystems online and reports volume stats. It
// finds LVs through lvmd and mounts through k8s.io/mount-utils; it creates
// and removes no LV.
package csi
