package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/thinlvm/thinlvm/api/lvmname"
)

// Every name thinlvm derives, in one place: the controller names the
// LogicalVolume of a CSI volume or snapshot, the node agent and the CSI
// node service name its LV, and every node names a GoldenImage's base.

// ObjectName is the LogicalVolume name of a CSI volume or snapshot name:
// the name itself when it is a valid object name (the provisioner's
// "pvc-<uid>", the snapshotter's "snapshot-<uid>"), else prefix and a
// stable hash. It is also the CSI volume or snapshot ID.
func ObjectName(prefix, csiName string) string {
	if len(validation.IsDNS1123Subdomain(csiName)) == 0 && len(csiName) <= 200 {
		return csiName
	}
	sum := sha256.Sum256([]byte(csiName))
	return prefix + "-" + hex.EncodeToString(sum[:20])
}

// LVName is the LV name of a LogicalVolume.
func LVName(lv *LogicalVolume) string { return LVNameOf(lv.Name) }

// LVNameOf is the LV name of the LogicalVolume named name (which is also
// its CSI volume ID): the name itself where lvm accepts it, else with "tl-"
// before it, else a stable hash of it. It never changes, so a restarted
// agent finds the LV it made and the CSI node service finds the LV of a
// volume ID. Two names can derive to one LV name ("snapshot-x" and
// "tl-snapshot-x"): the LV's owner tag tells whose it is.
func LVNameOf(name string) string {
	if lvmname.ValidateLVName(name) == nil {
		return name
	}
	if p := "tl-" + name; lvmname.ValidateLVName(p) == nil {
		return p // e.g. "snapshot-<uid>": "snapshot" is a reserved prefix
	}
	sum := sha256.Sum256([]byte(name))
	return "tl-" + hex.EncodeToString(sum[:20])
}

// BaseLVName is the LV name of a GoldenImage's base on every node: derived
// from the object's UID, so that a GoldenImage deleted and made again with
// the same name never finds the old base.
func BaseLVName(image *GoldenImage) string { return "gi-" + string(image.UID) }

// TransferLVName is the LV name, on the source's node, of the point-in-time
// snapshot that a copy to the LogicalVolume target (on another node) reads.
func TransferLVName(target string) string {
	sum := sha256.Sum256([]byte(target))
	return "tx-" + hex.EncodeToString(sum[:20])
}
