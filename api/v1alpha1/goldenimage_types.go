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

// HTTPSource is an image served over HTTP(S). An authSecret's credentials
// go over https only, or over plain http to the node's loopback (where they
// stay on the node): over plain http they would cross the network in clear.
// +kubebuilder:validation:XValidation:rule=`!has(self.authSecret) || size(self.authSecret) == 0 || self.url.startsWith('https://') || self.url.matches(r'^http://(localhost|127(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}|\[::1\])(:[0-9]*)?([/?#].*)?$')`,message="authSecret needs an https url: over plain http its credentials would cross the network in clear (http is allowed only to the node's loopback: localhost, 127.0.0.0/8, [::1])"
type HTTPSource struct {
	// URL is where the image is downloaded from.
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url"`
	// SHA256 is the hex SHA-256 of the bytes served (compressed or not): a
	// population whose bytes do not match fails and leaves no base.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	SHA256 string `json:"sha256"`
	// CAConfigMap names a ConfigMap in thinlvm's namespace whose key ca.crt
	// holds the PEM certificates that verify the server, instead of the
	// system's.
	// +optional
	CAConfigMap string `json:"caConfigMap,omitempty"`
	// AuthSecret names a Secret in thinlvm's namespace sent as the request's
	// credentials: keys username and password (basic), or token (bearer).
	// They are sent to the URL's host only, never to a redirect's, and only
	// with an https URL or a plain http one to the node's loopback.
	// +optional
	AuthSecret string `json:"authSecret,omitempty"`
}

// RegistrySource is an OCI image in KubeVirt's container-disk layout: one
// disk file (raw or qcow2, possibly gzip-, xz- or zstd-compressed) under
// /disk/ in its layers.
type RegistrySource struct {
	// Image is the image's reference pinned by digest,
	// registry/repository@sha256:<hex> (a tag may come before the @): the
	// digest is the image's integrity check, so a reference without one is
	// refused.
	// +kubebuilder:validation:Pattern=`^[^@\s]+@sha256:[0-9a-f]{64}$`
	Image string `json:"image"`
	// PullSecret names a Secret of type kubernetes.io/dockerconfigjson in
	// thinlvm's namespace with the registry's credentials.
	// +optional
	PullSecret string `json:"pullSecret,omitempty"`
	// CAConfigMap names a ConfigMap in thinlvm's namespace whose key ca.crt
	// holds the PEM certificates that verify the registry, instead of the
	// system's.
	// +optional
	CAConfigMap string `json:"caConfigMap,omitempty"`
}

// ClaimSource names a thinlvm PersistentVolumeClaim or VolumeSnapshot.
type ClaimSource struct {
	// Namespace and Name name the object.
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// ImageSource is where a golden image's bytes come from: exactly one of
// its fields.
// +kubebuilder:validation:XValidation:rule="(has(self.http) ? 1 : 0) + (has(self.registry) ? 1 : 0) + (has(self.pvc) ? 1 : 0) + (has(self.volumeSnapshot) ? 1 : 0) == 1",message="exactly one of http, registry, pvc and volumeSnapshot"
type ImageSource struct {
	// HTTP downloads the image from a URL.
	// +optional
	HTTP *HTTPSource `json:"http,omitempty"`
	// Registry pulls the image from an OCI registry.
	// +optional
	Registry *RegistrySource `json:"registry,omitempty"`
	// PVC takes the image from a bound thinlvm claim: the base is a thin
	// snapshot of its volume, made on that volume's node (O(1)), and
	// copied from there to other nodes.
	// +optional
	PVC *ClaimSource `json:"pvc,omitempty"`
	// VolumeSnapshot takes the image from a ready thinlvm VolumeSnapshot,
	// as PVC does.
	// +optional
	VolumeSnapshot *ClaimSource `json:"volumeSnapshot,omitempty"`
}

// FromVolume tells whether the image is taken from a thinlvm volume or
// snapshot rather than downloaded.
func (s *ImageSource) FromVolume() bool { return s.PVC != nil || s.VolumeSnapshot != nil }

// Prewarm says on which nodes the base is made before any volume needs it.
type Prewarm struct {
	// NodeSelector selects the nodes; empty selects every thinlvm node.
	NodeSelector metav1.LabelSelector `json:"nodeSelector"`
}

// GoldenImageSpec is a read-only disk image kept as a thin LV (a "base")
// on the nodes that use it.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: create a GoldenImage with another name"
// +kubebuilder:validation:XValidation:rule="has(self.size) || has(self.source.pvc) || has(self.source.volumeSnapshot)",message="size is required for http and registry sources"
type GoldenImageSpec struct {
	// Source is where the image comes from.
	Source ImageSource `json:"source"`
	// Format is raw (default) or qcow2; it applies to http and registry
	// sources.
	// +optional
	// +kubebuilder:default=raw
	Format ImageFormat `json:"format,omitempty"`
	// Size is the base LV's size: at least the image's raw size. Volumes
	// made from the base are at least this large. For a pvc or
	// volumeSnapshot source it is the volume's size and may be left out.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Mi')) >= 0",message="size must be at least 1Mi"
	Size resource.Quantity `json:"size,omitzero"`
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

// Reasons of a GoldenImage's conditions.
const (
	// ReasonBaseReady (Ready=True): at least one node holds a Ready base.
	ReasonBaseReady = "BaseReady"
	// ReasonPopulating (Ready=False): no base is Ready yet; some node is
	// making one.
	ReasonPopulating = "Populating"
	// ReasonNoReadyBase (Ready=False): no node holds or makes a base yet.
	ReasonNoReadyBase = "NoReadyBase"
	// ReasonSourceNotReady (Ready=False): the pvc or volumeSnapshot source
	// does not resolve to a volume yet (the claim is not bound, the
	// snapshot not ready to use); the message says what is missing, and
	// the controller looks again.
	ReasonSourceNotReady = "SourceNotReady"
	// ReasonSourceInvalid (Ready=False): the pvc or volumeSnapshot source is
	// not a thinlvm volume or snapshot, or it is larger than spec.size;
	// the controller does not retry until the source changes.
	ReasonSourceInvalid = "SourceInvalid"
	// ReasonPopulationFailed (Degraded=True): a node failed to make its
	// base.
	ReasonPopulationFailed = "PopulationFailed"
	// ReasonNoFailure (Degraded=False): no node reports a failed base.
	ReasonNoFailure = "NoFailure"
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
	// Nodes are the names of the nodes whose base is Ready, sorted, at
	// most 100 (readyNodes counts them all).
	// +optional
	Nodes []string `json:"nodes,omitempty"`
	// SourceVolume is the LogicalVolume a pvc or volumeSnapshot source
	// resolved to, and its node, where the first base is made.
	// +optional
	SourceVolume *SourceVolumeStatus `json:"sourceVolume,omitempty"`
	// Channels are the GoldenImageChannels that point at the image.
	// +optional
	Channels []string `json:"channels,omitempty"`
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

// SourceVolumeStatus is the thinlvm volume a GoldenImage is taken from.
type SourceVolumeStatus struct {
	// LogicalVolume is the volume's (or snapshot's) LogicalVolume name.
	LogicalVolume string `json:"logicalVolume"`
	// NodeName is its node.
	NodeName string `json:"nodeName"`
	// Size is its size, the base's size.
	Size resource.Quantity `json:"size"`
}

// GoldenImage is a disk image that nodes keep as a read-only thin LV; every
// volume of a StorageClass naming it (parameter thinlvm.io/golden-image),
// or of a claim whose dataSourceRef names it, is a thin snapshot of the
// base on its node.
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

// BaseSize is the size of the image's base on every node: spec.size, or
// for an image taken from a volume without one, the volume's size once the
// controller resolved it (zero before).
func (gi *GoldenImage) BaseSize() resource.Quantity {
	if gi.Spec.Size.IsZero() && gi.Status.SourceVolume != nil {
		return gi.Status.SourceVolume.Size
	}
	return gi.Spec.Size
}

// GoldenImageList is a list of GoldenImages.
// +kubebuilder:object:root=true
type GoldenImageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GoldenImage `json:"items"`
}

func init() {
	register(&GoldenImage{}, &GoldenImageList{})
}
