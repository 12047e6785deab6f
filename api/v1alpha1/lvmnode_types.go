package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeviceClassType is how a device class allocates its volumes.
// +kubebuilder:validation:Enum=thin;thick
type DeviceClassType string

const (
	// DeviceClassThin carves thin LVs from a thin pool.
	DeviceClassThin DeviceClassType = "thin"
	// DeviceClassThick allocates LVs from the volume group's free extents.
	DeviceClassThick DeviceClassType = "thick"
)

// DeviceClassStatus is one device class's capacity as lvmd reports it.
type DeviceClassStatus struct {
	// Name is the device class.
	Name string `json:"name"`
	// Type is "thick" for a class that allocates its LVs from the volume
	// group's free extents: no thin pool, no snapshots, no golden bases;
	// empty (or "thin") for a thin pool's.
	// +optional
	Type DeviceClassType `json:"type,omitempty"`
	// VolumeGroup and ThinPool are the class's LVM VG and thin pool (empty
	// in a thick class).
	VolumeGroup string `json:"volumeGroup"`
	ThinPool    string `json:"thinPool"`
	// Default marks the node's default class.
	// +optional
	Default bool `json:"default,omitempty"`
	// VGSize and VGFree are the volume group's size and free space.
	VGSize resource.Quantity `json:"vgSize"`
	VGFree resource.Quantity `json:"vgFree"`
	// PoolSize is the thin pool's size.
	PoolSize resource.Quantity `json:"poolSize"`
	// DataUsed is the pool's data in use.
	DataUsed resource.Quantity `json:"dataUsed"`
	// DataPercent and MetadataPercent are the pool's use, e.g. "12.34".
	DataPercent     string `json:"dataPercent"`
	MetadataPercent string `json:"metadataPercent"`
	// Virtual is the sum of the thin LVs' sizes.
	Virtual resource.Quantity `json:"virtual"`
	// OverprovisionRatio is the class's ratio, e.g. "4".
	OverprovisionRatio string `json:"overprovisionRatio"`
	// Available is the largest new volume the class accepts now.
	Available resource.Quantity `json:"available"`
	// LVCount is the number of thinlvm LVs in the class.
	LVCount int32 `json:"lvCount"`
	// OverHighWatermark is true while the pool's data or metadata use is
	// over the class's high-water mark: new volumes and growth are refused
	// so that written volumes keep room.
	// +optional
	OverHighWatermark bool `json:"overHighWatermark,omitempty"`
	// PoolHealth is the thin pool's state when it is not taking writes
	// normally; empty when it is.
	// +optional
	PoolHealth ThinPoolHealth `json:"poolHealth,omitempty"`
	// VGMetadata is the volume group's metadata area; unset when lvmd does
	// not report it.
	// +optional
	VGMetadata *VGMetadataStatus `json:"vgMetadata,omitempty"`
	// Unavailable says why the class serves no volumes on this node: its
	// volume group or thin pool is missing ("volume group vg0 not
	// found"). Empty when it serves. While set, Available is 0; the agent
	// picks the VG up once it is made, without a restart.
	// +optional
	Unavailable string `json:"unavailable,omitempty"`
}

// VGMetadataStatus is the room in a volume group's metadata area. lvm2
// rewrites the VG's whole text metadata into each PV's metadata area on
// every change, and each LV adds about 400 bytes to it, so the area bounds
// how many LVs the VG holds: about 1,300 with pvcreate's default area.
type VGMetadataStatus struct {
	// Size is the metadata area of the VG's PVs (the smallest), set by
	// pvcreate --metadatasize. A copy of the metadata takes at most half of
	// it, as lvm writes the new copy beside the old.
	Size resource.Quantity `json:"size"`
	// Free is how much the VG's metadata can still grow.
	Free resource.Quantity `json:"free"`
	// LVsLeft is how many more volumes lvmd creates in the VG before it
	// refuses new ones for want of metadata room, at a typical volume's
	// size: 0 means new volumes and snapshots are refused now.
	// +kubebuilder:validation:Minimum=0
	LVsLeft int32 `json:"lvsLeft"`
}

// ThinPoolHealth is a thin pool's state as lvm reports it.
// +kubebuilder:validation:Enum=OutOfDataSpace;MetadataReadOnly;Failed
type ThinPoolHealth string

// Thin pool states.
const (
	// ThinPoolOutOfDataSpace: the pool's data is full; writes that need new
	// space fail (or wait, when lvmd lets them queue for an autoextend).
	ThinPoolOutOfDataSpace ThinPoolHealth = "OutOfDataSpace"
	// ThinPoolMetadataReadOnly: the kernel made the pool read-only (its
	// metadata is full or damaged).
	ThinPoolMetadataReadOnly ThinPoolHealth = "MetadataReadOnly"
	// ThinPoolFailed: the kernel failed the pool.
	ThinPoolFailed ThinPoolHealth = "Failed"
)

// Reasons of the Events the node agent records on its LVMNode as a pool
// fills and recovers.
const (
	// ReasonThinPoolOverHighWatermark (Warning): a pool went over its
	// high-water mark; new volumes are refused.
	ReasonThinPoolOverHighWatermark = "ThinPoolOverHighWatermark"
	// ReasonThinPoolUnderHighWatermark (Normal): it went back under.
	ReasonThinPoolUnderHighWatermark = "ThinPoolUnderHighWatermark"
	// ReasonThinPoolUnhealthy (Warning): a pool ran out of data space, went
	// read-only or failed.
	ReasonThinPoolUnhealthy = "ThinPoolUnhealthy"
	// ReasonThinPoolRecovered (Normal): it takes writes again.
	ReasonThinPoolRecovered = "ThinPoolRecovered"
	// ReasonVGMetadataFull (Warning): a volume group's metadata area has no
	// room for another volume; new volumes are refused.
	ReasonVGMetadataFull = "VGMetadataFull"
	// ReasonVGMetadataRoom (Normal): it has room again.
	ReasonVGMetadataRoom = "VGMetadataRoom"
	// ReasonDeviceClassUnavailable (Warning, and the Ready condition's
	// reason while it lasts): a device class's volume group or thin pool
	// is missing on the node.
	ReasonDeviceClassUnavailable = "DeviceClassUnavailable"
	// ReasonDeviceClassAvailable (Normal): it serves again.
	ReasonDeviceClassAvailable = "DeviceClassAvailable"
	// ReasonDeviceClassesReady is the Ready condition's reason when every
	// device class serves.
	ReasonDeviceClassesReady = "DeviceClassesReady"
)

// GoldenBaseState is the state of a golden base on a node.
// +kubebuilder:validation:Enum=Populating;Ready;Failed
type GoldenBaseState string

// Golden base states.
const (
	GoldenBasePopulating GoldenBaseState = "Populating"
	GoldenBaseReady      GoldenBaseState = "Ready"
	GoldenBaseFailed     GoldenBaseState = "Failed"
)

// GoldenBaseStatus is a golden base held on the node.
type GoldenBaseStatus struct {
	// Name is the GoldenImage's name.
	Name string `json:"name"`
	// LV is the base's LV name.
	LV string `json:"lv"`
	// DeviceClass is the class the base lives in.
	// +optional
	DeviceClass string `json:"deviceClass,omitempty"`
	// Size is the base's size.
	Size resource.Quantity `json:"size"`
	// State is Populating, Ready or Failed.
	State GoldenBaseState `json:"state"`
	// BytesDone and BytesTotal tell a population's progress.
	// +optional
	BytesDone int64 `json:"bytesDone,omitempty"`
	// +optional
	BytesTotal int64 `json:"bytesTotal,omitempty"`
	// Message says why a base Failed.
	// +optional
	Message string `json:"message,omitempty"`
	// From is where the base's data came from: "origin" (the image's
	// source), "volume" (a local thin snapshot of the source volume), or
	// the name of the peer node it was copied from.
	// +optional
	From string `json:"from,omitempty"`
	// ContentSHA256 is the Ready base's content checksum, computed on this
	// node over all of its size: the hex SHA-256 of the SHA-256 digests of
	// its 4 MiB chunks, in order (a chunk of zeros is recognised, not
	// hashed again). A node that copies the base from this one checks its
	// copy against it.
	// +optional
	ContentSHA256 string `json:"contentSHA256,omitempty"`
}

// Where a base came from (GoldenBaseStatus.From), besides a peer's name.
const (
	BaseFromOrigin = "origin"
	BaseFromVolume = "volume"
)

// TransferEndpoint is a node agent's transfer endpoint. Only the node's
// own agent may write its LVMNode (see the node identity admission
// policy), so a caller that pins the certificate below talks to that
// node's agent and nobody else.
type TransferEndpoint struct {
	// Address is host:port on the node network.
	Address string `json:"address"`
	// CertificateSHA256 is the hex SHA-256 of the DER certificate the
	// endpoint presents; the agent makes a new key and certificate each
	// time it starts.
	CertificateSHA256 string `json:"certificateSHA256"`
}

// LVMNodeStatus is what the node agent publishes of its node.
type LVMNodeStatus struct {
	// DeviceClasses are the node's device classes with their capacity.
	// +optional
	// +listType=map
	// +listMapKey=name
	DeviceClasses []DeviceClassStatus `json:"deviceClasses,omitempty"`
	// GoldenBases are the golden bases the node holds.
	// +optional
	// +listType=map
	// +listMapKey=name
	GoldenBases []GoldenBaseStatus `json:"goldenBases,omitempty"`
	// Transfer is where the node's agent serves the data of its volumes to
	// other nodes' agents; empty when it does not.
	// +optional
	Transfer *TransferEndpoint `json:"transfer,omitempty"`
	// UpdateTime is when the agent last wrote the status.
	// +optional
	UpdateTime *metav1.Time `json:"updateTime,omitempty"`
	// Conditions: Ready is True when every device class of the node serves
	// volumes, False (reason DeviceClassUnavailable) while one's volume
	// group or thin pool is missing.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// LVMNode is one node's LVM capacity and golden bases, written by its node
// agent and read by the controller and the scheduler. Its name is the
// node's name.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.status.deviceClasses[0].name`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.deviceClasses[0].available`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.status.deviceClasses[0].poolSize`
// +kubebuilder:printcolumn:name="Data%",type=string,JSONPath=`.status.deviceClasses[0].dataPercent`
// +kubebuilder:printcolumn:name="Meta%",type=string,JSONPath=`.status.deviceClasses[0].metadataPercent`
// +kubebuilder:printcolumn:name="LVs",type=integer,JSONPath=`.status.deviceClasses[0].lvCount`
// +kubebuilder:printcolumn:name="LVsLeft",type=integer,JSONPath=`.status.deviceClasses[0].vgMetadata.lvsLeft`,priority=1
// +kubebuilder:printcolumn:name="Updated",type=date,JSONPath=`.status.updateTime`
type LVMNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status LVMNodeStatus `json:"status,omitempty"`
}

// LVMNodeList is a list of LVMNodes.
// +kubebuilder:object:root=true
type LVMNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LVMNode `json:"items"`
}

func init() {
	register(&LVMNode{}, &LVMNodeList{})
}
