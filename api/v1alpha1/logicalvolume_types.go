package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SourceKind is what a LogicalVolume is made from.
// +kubebuilder:validation:Enum=Volume;Snapshot;GoldenImage
type SourceKind string

// Source kinds.
const (
	// SourceVolume clones another LogicalVolume (a read-write thin snapshot).
	SourceVolume SourceKind = "Volume"
	// SourceSnapshot restores a snapshot LogicalVolume.
	SourceSnapshot SourceKind = "Snapshot"
	// SourceGoldenImage makes the volume from a node's golden base.
	SourceGoldenImage SourceKind = "GoldenImage"
)

// AccessType is whether the LV may be written.
// +kubebuilder:validation:Enum=rw;ro
type AccessType string

// Access types.
const (
	AccessReadWrite AccessType = "rw"
	AccessReadOnly  AccessType = "ro"
)

// VolumeRole is what a LogicalVolume is to its users: a volume (a CSI
// volume) or a snapshot (a CSI snapshot). It is a spec field, immutable and
// validated by the API server, because the controller decides by it what a
// CSI ID names; a label anyone may edit must never decide that.
// +kubebuilder:validation:Enum=Volume;Snapshot
type VolumeRole string

// Volume roles.
const (
	// RoleVolume is a CSI volume.
	RoleVolume VolumeRole = "Volume"
	// RoleSnapshot is a CSI snapshot: a read-only thin snapshot whose
	// spec.source (kind Volume) names the volume it was taken of.
	RoleSnapshot VolumeRole = "Snapshot"
)

// VolumeSource names what a LogicalVolume is made from.
type VolumeSource struct {
	// Kind is the kind of source.
	Kind SourceKind `json:"kind"`
	// Name is the source's name: a LogicalVolume's name for Volume and
	// Snapshot, a GoldenImage's for GoldenImage.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// LogicalVolumeSpec is the LV wanted on one node.
// +kubebuilder:validation:XValidation:rule="quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) >= 0",message="size may only grow"
// +kubebuilder:validation:XValidation:rule="has(self.deviceClass) == has(oldSelf.deviceClass) && (!has(self.deviceClass) || self.deviceClass == oldSelf.deviceClass)",message="deviceClass is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.source) == has(oldSelf.source) && (!has(self.source) || self.source == oldSelf.source)",message="source is immutable"
type LogicalVolumeSpec struct {
	// Name is the volume's name outside Kubernetes objects (the CSI volume
	// name); the LV is named after the LogicalVolume object.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// NodeName is the node whose agent makes the LV.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	NodeName string `json:"nodeName"`

	// DeviceClass is lvmd's device class (thin pool); empty for the node's
	// default.
	// +optional
	DeviceClass string `json:"deviceClass,omitempty"`

	// Size is the LV's size; it may grow, never shrink.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Mi')) >= 0",message="size must be at least 1Mi"
	Size resource.Quantity `json:"size"`

	// Source makes the LV a thin snapshot of another volume, a snapshot or
	// a golden base.
	// +optional
	Source *VolumeSource `json:"source,omitempty"`

	// Adopt makes the node agent take over an existing LV of the object's
	// LV name in the device class (another driver's, e.g. TopoLVM's) in
	// place instead of making one; `kubectl thinlvm adopt` sets it.
	// Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="adopt is immutable"
	Adopt bool `json:"adopt,omitempty"`

	// AccessType is rw (default) or ro.
	// +optional
	// +kubebuilder:default=rw
	AccessType AccessType `json:"accessType,omitempty"`

	// Role is Volume (default) or Snapshot; a snapshot's source is
	// spec.source.
	// +optional
	// +kubebuilder:default=Volume
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="role is immutable"
	Role VolumeRole `json:"role,omitempty"`
}

// Condition types of a LogicalVolume.
const (
	// ConditionReady is True when the LV exists with the spec's size, and
	// of an LVMNode when every device class of the node serves volumes.
	ConditionReady = "Ready"
	// ConditionFailed is True when the last attempt failed; its reason is
	// one of the Reason constants below and its message lvmd's or the node
	// agent's.
	ConditionFailed = "Failed"
)

// Condition reasons of a LogicalVolume. They are the API's own words: the
// node agent chooses one for each outcome; what a failure reason means (the
// code of the CSI call, how the agent retries) is in one table, Failure's;
// neither side parses a gRPC code's name.
const (
	// ReasonCreated (Ready=True): the LV exists with the spec's size.
	ReasonCreated = "Created"
	// ReasonSucceeded (Failed=False): the last attempt succeeded.
	ReasonSucceeded = "Succeeded"
	// ReasonWaitingForBase (Ready=False, Failed=False): the volume's golden
	// base is being made on the node; not a failure.
	ReasonWaitingForBase = "WaitingForBase"

	// ReasonNoSpace: lvmd found no room in the thin pool or VG, or the pool
	// is over its high-water mark. Retried; the provisioner may reschedule.
	ReasonNoSpace = "NoSpace"
	// ReasonSourceNotFound: the source (a LogicalVolume, its LV, or a
	// GoldenImage) does not exist or is not made yet. Retried.
	ReasonSourceNotFound = "SourceNotFound"
	// ReasonCopying (Ready=False, Failed=False): the volume's source is on
	// another node and its data is being copied from there; the progress
	// is in status.transfer. Not a failure.
	ReasonCopying = "Copying"
	// ReasonTransferFailed: copying the data from the source's node failed
	// (the node unreachable, the source gone, a checksum mismatch); the
	// half-made LV was removed. Retried by a new attempt.
	ReasonTransferFailed = "TransferFailed"
	// ReasonSourceMismatch: the source (or the GoldenImage) is in another
	// device class, or the LV found for it is not the source's own.
	ReasonSourceMismatch = "SourceMismatch"
	// ReasonForeignLV: an LV of this name exists that thinlvm does not
	// manage (no thinlvm tag, or in another thin pool).
	ReasonForeignLV = "ForeignLV"
	// ReasonDeviceClassUnavailable, the LVMNode's reason of that name, is a
	// LogicalVolume's too: the device class's volume group or thin pool is
	// missing on the node (lvmd serves its other classes). Retried: it may
	// appear.
	// ReasonInvalidSpec: lvmd refused the request as invalid, e.g. a
	// device class it does not know.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonSizeOutOfRange: lvmd refused the size, e.g. a shrink.
	ReasonSizeOutOfRange = "SizeOutOfRange"
	// ReasonConflict: the LV exists with another size or source, or belongs
	// to another LogicalVolume whose name derives to the same LV name.
	ReasonConflict = "Conflict"
	// ReasonBaseFailed: the golden base of the volume's GoldenImage failed
	// on this node.
	ReasonBaseFailed = "BaseFailed"
	// ReasonUnsupported: the node agent does not support what the spec asks
	// for (e.g. a source kind newer than the agent).
	ReasonUnsupported = "Unsupported"
	// ReasonLVMDUnavailable: the node agent could not reach lvmd.
	ReasonLVMDUnavailable = "LVMDUnavailable"
	// ReasonLVMTimeout: an lvmd call did not finish in time.
	ReasonLVMTimeout = "LVMTimeout"
	// ReasonLVMFailed: anything else (an lvm command failed, lvmd or the
	// API server answered with an internal error). Retried with backoff.
	ReasonLVMFailed = "LVMFailed"
)

// LogicalVolumeStatus is what the node agent observed.
type LogicalVolumeStatus struct {
	// VolumeID is the LV's name in the volume group.
	// +optional
	VolumeID string `json:"volumeID,omitempty"`
	// CurrentSize is the LV's size.
	// +optional
	CurrentSize *resource.Quantity `json:"currentSize,omitempty"`
	// Conditions are Ready and Failed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Transfer is the copy of the data from the source's node, for a clone
	// or restore made on another node than its source.
	// +optional
	Transfer *TransferStatus `json:"transfer,omitempty"`
}

// TransferMode is what a copy from another node sends.
// +kubebuilder:validation:Enum=Delta;Mapped
type TransferMode string

// Transfer modes.
const (
	// TransferDelta: the source descends from a golden base this node holds
	// too (same GoldenImage UID and sha256); the volume is a thin snapshot
	// of the local base and receives only the ranges where the source
	// differs from it.
	TransferDelta TransferMode = "Delta"
	// TransferMapped: no shared base; the volume receives the ranges the
	// source maps, and what the source leaves unmapped stays unmapped.
	TransferMapped TransferMode = "Mapped"
)

// TransferStatus is the progress of a copy from the source's node.
type TransferStatus struct {
	// SourceNode is the node the data comes from.
	SourceNode string `json:"sourceNode"`
	// Mode is Delta or Mapped; empty until the source answered.
	// +optional
	Mode TransferMode `json:"mode,omitempty"`
	// Base is the GoldenImage whose base both nodes hold, in Delta mode.
	// +optional
	Base string `json:"base,omitempty"`
	// BytesDone and BytesTotal are the data copied and to copy (the
	// ranges' length, before compression).
	// +optional
	BytesDone int64 `json:"bytesDone,omitempty"`
	// +optional
	BytesTotal int64 `json:"bytesTotal,omitempty"`
	// BytesSent is what crossed the network (compressed).
	// +optional
	BytesSent int64 `json:"bytesSent,omitempty"`
	// BytesPerSecond is the copy's mean rate so far.
	// +optional
	BytesPerSecond int64 `json:"bytesPerSecond,omitempty"`
	// Attempts counts the starts of this copy on this node (1 for the
	// first); a killed agent or a lost source node starts it again.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// StartTime and CompletionTime bound the last attempt (microseconds:
	// a copy may take less than a second).
	// +optional
	StartTime *metav1.MicroTime `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.MicroTime `json:"completionTime,omitempty"`
}

// LogicalVolume is a thin LV on one node, made and removed by that node's
// agent through lvmd.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=lv
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.role`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.deviceClass`
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.spec.size`
// +kubebuilder:printcolumn:name="Current",type=string,JSONPath=`.status.currentSize`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type LogicalVolume struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   LogicalVolumeSpec   `json:"spec"`
	Status LogicalVolumeStatus `json:"status,omitempty"`
}

// LogicalVolumeList is a list of LogicalVolumes.
// +kubebuilder:object:root=true
type LogicalVolumeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LogicalVolume `json:"items"`
}

func init() {
	register(&LogicalVolume{}, &LogicalVolumeList{})
}
