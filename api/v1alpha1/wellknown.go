package v1alpha1

import "k8s.io/apimachinery/pkg/types"

// Names every part of thinlvm and its users share.
const (
	// DriverName is the CSI driver's name.
	DriverName = "thinlvm.io"
	// TopologyKey is the CSI topology key whose value is the node's name.
	TopologyKey = "topology.thinlvm.io/node"
	// DeviceClassParameter is the StorageClass parameter naming lvmd's
	// device class.
	DeviceClassParameter = "thinlvm.io/device-class"
)

// LogicalVolumeFinalizer is the node agent's finalizer on LogicalVolumes:
// it keeps the object until the agent removed the LV.
const LogicalVolumeFinalizer = "thinlvm.io/lv"

// AdoptOfAnnotation is on a LogicalVolume with spec.adopt while `kubectl
// thinlvm adopt` takes a claim over ("namespace/name"), with the rest of
// the adoption's record: the node agent does not remove the LV of such an
// object when it is deleted (other objects may still point at the data),
// until the adoption ends or the annotation is removed.
const AdoptOfAnnotation = "thinlvm.io/adopt-of"

// GoldenImageParameter is the StorageClass parameter naming the GoldenImage
// every volume of the class is made from.
const GoldenImageParameter = "thinlvm.io/golden-image"

// GoldenImageChannelParameter is the StorageClass parameter naming the
// GoldenImageChannel whose current GoldenImage every new volume of the
// class is made from.
const GoldenImageChannelParameter = "thinlvm.io/golden-image-channel"

// Kinds a claim's dataSourceRef (apiGroup thinlvm.io) may name: the volume
// is made from that GoldenImage's base, or from the base of the
// GoldenImage the channel points at.
const (
	KindGoldenImage        = "GoldenImage"
	KindGoldenImageChannel = "GoldenImageChannel"
)

// PopulateGoldenImageAnnotation is set by the controller, and honoured
// only, on the claims it makes in its own namespace to populate a claim
// whose dataSourceRef names a GoldenImage or a channel: it names the
// GoldenImage the volume is made from.
const PopulateGoldenImageAnnotation = "thinlvm.io/populate-golden-image"

// GoldenImageAnnotation is set by the controller on a claim whose
// dataSourceRef names a GoldenImage or a GoldenImageChannel: the
// GoldenImage its volume is made from, resolved once when the controller
// first sees the claim, so that a channel moving while the claim waits
// does not change it. The scheduler plugin reads it too.
const GoldenImageAnnotation = "thinlvm.io/golden-image"

// OwnerTagPrefix prefixes the lvm tag that names an LV's LogicalVolume
// ("lv:<name>"): the node agent tags every LV it makes with it, and an LV
// is a LogicalVolume's only when it carries that tag.
const OwnerTagPrefix = "lv:"

// BaseTagPrefix prefixes the lvm tag that names a golden base's GoldenImage
// ("base:<name>").
const BaseTagPrefix = "base:"

// TransferTagPrefix prefixes the lvm tag of a transfer snapshot that names
// the LogicalVolume it is copied to ("transfer:<name>").
const TransferTagPrefix = "transfer:"

// IncompleteTag marks an LV whose data is still being copied from another
// node: it is never Ready, and an agent that finds it without its copy
// running removes it and starts again.
const IncompleteTag = "incomplete"

// GoldenImageChannelFinalizer is the controller's finalizer on a
// GoldenImage that the spec of a GoldenImageChannel names: deleting the
// image waits until no channel points at it any more.
const GoldenImageChannelFinalizer = "thinlvm.io/channel"

// ChannelLabelPrefix prefixes the label the controller puts on every
// GoldenImage a GoldenImageChannel has pointed at ("channel.thinlvm.io/<the
// channel's UID>", its value the channel's name where that is a valid label
// value): the channel's earlier versions are the images that carry it. The
// UID, not the name, keys it, so that a channel made again with the same
// name starts without history.
const ChannelLabelPrefix = "channel.thinlvm.io/"

// ChannelLabel is the label key that marks a GoldenImage as a version of
// the GoldenImageChannel whose UID is uid.
func ChannelLabel(uid types.UID) string { return ChannelLabelPrefix + string(uid) }

// ImageCredentialsLabel marks the Secrets (in thinlvm's namespace) that a
// GoldenImage's source may name as its credentials (authSecret,
// pullSecret): value "true". A node agent sends no other Secret anywhere,
// so whoever may create GoldenImages cannot send the namespace's other
// Secrets to a server of their choosing.
const ImageCredentialsLabel = "thinlvm.io/image-credentials"

// LogicalVolumeNodeField is the field selector key of a LogicalVolume's
// node (a selectable field of the CRD): each node agent lists and watches
// only its own node's volumes.
const LogicalVolumeNodeField = "spec.nodeName"
