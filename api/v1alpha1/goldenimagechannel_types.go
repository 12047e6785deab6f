package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GoldenImageChannelSpec names the current version of an image.
type GoldenImageChannelSpec struct {
	// GoldenImage is the current version: new volumes made through the
	// channel are made from it. Changing it leaves volumes made before on
	// their version.
	// +kubebuilder:validation:MinLength=1
	GoldenImage string `json:"goldenImage"`
}

// ChannelVersion is one GoldenImage a channel points or pointed at, and
// the nodes that hold its base.
type ChannelVersion struct {
	// GoldenImage is the version's name.
	GoldenImage string `json:"goldenImage"`
	// Current is true for the version the channel points at.
	// +optional
	Current bool `json:"current,omitempty"`
	// ReadyNodes counts the nodes whose base is Ready.
	// +optional
	ReadyNodes int32 `json:"readyNodes"`
	// Nodes are their names, sorted, at most 100.
	// +optional
	Nodes []string `json:"nodes,omitempty"`
	// Volumes counts the LogicalVolumes made from the version.
	// +optional
	Volumes int32 `json:"volumes"`
}

// Condition types of a GoldenImageChannel.
const (
	// ConditionChannelReady is True when the current GoldenImage exists
	// and at least one node holds its base Ready.
	ConditionChannelReady = "Ready"
)

// Reasons of a GoldenImageChannel's Ready condition, besides the
// GoldenImage's ReasonBaseReady and ReasonNoReadyBase.
const (
	// ReasonGoldenImageNotFound (Ready=False): spec.goldenImage names no
	// GoldenImage; new volumes through the channel fail until it exists.
	ReasonGoldenImageNotFound = "GoldenImageNotFound"
)

// GoldenImageChannelStatus is the controller's view of the channel.
type GoldenImageChannelStatus struct {
	// Versions are the current version and every earlier one that still
	// exists, current first.
	// +optional
	Versions []ChannelVersion `json:"versions,omitempty"`
	// Conditions are Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// GoldenImageChannel is a stable name for the current version of an image:
// a StorageClass (parameter thinlvm.io/golden-image-channel) or a claim's
// dataSourceRef names the channel, and each new volume is made from the
// GoldenImage the channel points at when the volume is made.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=gic
// +kubebuilder:printcolumn:name="Current",type=string,JSONPath=`.spec.goldenImage`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GoldenImageChannel struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GoldenImageChannelSpec   `json:"spec"`
	Status GoldenImageChannelStatus `json:"status,omitempty"`
}

// GoldenImageChannelList is a list of GoldenImageChannels.
// +kubebuilder:object:root=true
type GoldenImageChannelList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GoldenImageChannel `json:"items"`
}

func init() {
	register(&GoldenImageChannel{}, &GoldenImageChannelList{})
}
