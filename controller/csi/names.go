package csi

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/util/validation"
)

// objectName is the LogicalVolume name of a CSI volume or snapshot name:
// the name itself when it is a valid object name (the provisioner's
// "pvc-<uid>", the snapshotter's "snapshot-<uid>"), else a stable hash. It is
// also the CSI volume or snapshot ID.
func objectName(prefix, csiName string) string {
	if len(validation.IsDNS1123Subdomain(csiName)) == 0 && len(csiName) <= 200 {
		return csiName
	}
	sum := sha256.Sum256([]byte(csiName))
	return prefix + "-" + hex.EncodeToString(sum[:20])
}
