package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageFormat is the format of a golden image's source.
// +kubebuilder:validation:Enum=raw;qcow2
type ImageFormat string

// Image formats.
const (
	// FormatRaw is a raw disk image, optionally gzip-, xz- or
	// zstd-compressed (told by its first bytes).
	FormatRaw ImageFormat = "raw"
	// FormatQCOW2 is a qcow2 image, converted to raw on the node.
	FormatQCOW2 ImageFormat = "qcow2"
)

// HTTPSource is an image served over HTTP(S).
type HTTPSource struct {
	// URL is where the image is downloaded from.
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url"`
	// SHA256 is the hex SHA-256 of the bytes served (compressed or not): a
	// population whose bytes do not match fails and leaves no base.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	SHA256 string `json:"sha256"`
}

// ImageSource is where a golden image's bytes come from.
type ImageSource struct {
	// HTTP downloads the image on every node that needs it.
	HTTP *HTTPSource `json:"http"`
}

// Prewarm says on which nodes the base is made before any volume needs it.
type Prewarm struct {
	// NodeSelector selects the nodes; empty selects every thinlvm node.
	NodeSelector metav1.LabelSelector `json:"nodeSelector"`
}

// GoldenImageSpec is a read-only disk image kept as a thin LV (a "base")
// on the nodes that use it.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: create a GoldenImage with another name"
type GoldenImageSpec struct {
	// Source is where the image comes from.
	Source ImageSource `json:"source"`
	// Format is raw (default) or qcow2; it applies to an HTTP source.
	// +optional
	// +kubebuilder:default=raw
	Format ImageFormat `json:"format,omitempty"`
	// Size is the base LV's size: at least the image's raw size. Volumes
	// made from the base are at least this large.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Mi')) >= 0",message="size must be at least 1Mi"
	Size resource.Quantity `json:"size"`
	// DeviceClass is the lvmd device class (thin pool) of the base and of
	// every volume made from it; empty for each node's default.
	// +optional
	DeviceClass string `json:"deviceClass,omitempty"`
	// Prewarm makes the base on the selected nodes ahead of use; without
	// it a node makes the base when its first volume needs it.
	// +optional
	Prewarm *Prewarm `json:"prewarm,omitempty"`
}

// Condition types of a GoldenImage.
const (
	// ConditionImageReady is True when at least one node holds a Ready
	// base.
	ConditionImageReady = "Ready"
	// ConditionImageDegraded is True when a node failed to make its base;
	// the message is the last failure.
	ConditionImageDegraded = "Degraded"
)

// GoldenImageStatus is the controller's summary of the nodes' bases.
type GoldenImageStatus struct {
	// ReadyNodes, PopulatingNodes and FailedNodes count the nodes whose
	// base is in that state.
	// +optional
	ReadyNodes int32 `json:"readyNodes"`
	// +optional
	PopulatingNodes int32 `json:"populatingNodes"`
	// +optional
	FailedNodes int32 `json:"failedNodes"`
	// LastError is the newest failure a node reported, with its node.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// Conditions are Ready and Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// GoldenImage is a disk image that nodes keep as a read-only thin LV; every
// volume of a StorageClass naming it (parameter thinlvm.io/golden-image) is
// a thin snapshot of the base on its node.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=gi
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.spec.size`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyNodes`
// +kubebuilder:printcolumn:name="Populating",type=integer,JSONPath=`.status.populatingNodes`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failedNodes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GoldenImage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GoldenImageSpec   `json:"spec"`
	Status GoldenImageStatus `json:"status,omitempty"`
}

// GoldenImageList is a list of GoldenImages.
// +kubebuilder:object:root=true
type GoldenImageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GoldenImage `json:"items"`
}

func init() {
	SchemeBuilder.Register(&GoldenImage{}, &GoldenImageList{})
}
