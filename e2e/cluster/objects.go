package cluster

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

// VolumeSnapshot is a VolumeSnapshot in "default" of the claim, in the
// test bed's class (SnapshotClass); with claim empty, a reference to one by
// name alone (to get or delete it).
func VolumeSnapshot(name, claim string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": name, "namespace": "default"},
	}}
	if claim != "" {
		u.Object["spec"] = map[string]any{"volumeSnapshotClassName": SnapshotClass, "source": map[string]any{"persistentVolumeClaimName": claim}}
	}
	return u
}

// Claim is a ReadWriteOnce claim in "default"; with block true, a raw
// block volume.
func Claim(name, class string, size string, block bool) *corev1.PersistentVolumeClaim {
	p := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	if block {
		p.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
	}
	return p
}

// Pod is a pod in "default" that the thinlvm scheduler (deploy/'s
// profile) places, using the claims at /v0, /v1, ...; with block true as
// devices there. On a real node it sleeps (BusyboxImage); on a simulated
// one kwok reports it running.
func Pod(name string, block bool, affinity *corev1.Affinity, claims ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			SchedulerName: "thinlvm-scheduler", // deploy/scheduler's profile
			Containers: []corev1.Container{{Name: "c", Image: BusyboxImage,
				Command: []string{"/bin/sh", "-c", "exec sleep 1000000"}}},
			TerminationGracePeriodSeconds: ptr.To(int64(1)), // sleep, PID 1, ignores SIGTERM
			Tolerations:                   []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Affinity:                      affinity,
		},
	}
	for i, c := range claims {
		v := fmt.Sprintf("v%d", i)
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
		if block {
			p.Spec.Containers[0].VolumeDevices = append(p.Spec.Containers[0].VolumeDevices, corev1.VolumeDevice{Name: v, DevicePath: "/dev/" + v})
		} else {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: v, MountPath: "/" + v})
		}
	}
	return p
}

// OnNode is the affinity that pins a pod to a node.
func OnNode(node string) *corev1.Affinity { return requireLabel("kubernetes.io/hostname", node) }

// Labelled is the affinity that keeps a pod to the nodes labelled key=true
// (a test's own nodes).
func Labelled(key string) *corev1.Affinity { return requireLabel(key, "true") }

func requireLabel(key, value string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}}}}}}}
}
