package reconciler_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/testutil"
)

func channel(name, image string) *thinlvmv1.GoldenImageChannel {
	return &thinlvmv1.GoldenImageChannel{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: thinlvmv1.GoldenImageChannelSpec{GoldenImage: image}}
}

// pointAt moves the channel to image.
func pointAt(t *testing.T, name, image string) {
	t.Helper()
	ctx := context.Background()
	ch := &thinlvmv1.GoldenImageChannel{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: name}, ch); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ch.DeepCopy())
	ch.Spec.GoldenImage = image
	if err := k8s.Patch(ctx, ch, patch); err != nil {
		t.Fatal(err)
	}
}

func getChannel(t *testing.T, name string) *thinlvmv1.GoldenImageChannel {
	t.Helper()
	ch := &thinlvmv1.GoldenImageChannel{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: name}, ch); err != nil {
		t.Fatal(err)
	}
	return ch
}

func held(gi *thinlvmv1.GoldenImage) bool {
	return controllerutil.ContainsFinalizer(gi, thinlvmv1.GoldenImageChannelFinalizer)
}

// A GoldenImage a channel points at lists the channel and is kept while any
// channel points at it: deleting it waits until the last channel moves on
// or goes. An image no channel points at has no finalizer.
func TestChannelHoldsItsImage(t *testing.T) {
	ctx := context.Background()
	create(t, httpImage("fin-a"), httpImage("fin-b"), httpImage("fin-c"),
		channel("fin-1", "fin-a"), channel("fin-2", "fin-a"), channel("fin-0", "fin-b"))
	testutil.Eventually(t, "fin-a held, listing fin-1 and fin-2", func() bool {
		gi := getImage(t, "fin-a")
		return held(gi) && slices.Equal(gi.Status.Channels, []string{"fin-1", "fin-2"})
	})
	testutil.Eventually(t, "fin-b held, listing fin-0", func() bool {
		gi := getImage(t, "fin-b")
		return held(gi) && slices.Equal(gi.Status.Channels, []string{"fin-0"})
	})
	// fin-c's status is written after its metadata: no finalizer by then.
	testutil.Eventually(t, "fin-c's status", func() bool { return readyReason(getImage(t, "fin-c")) != "" })
	if gi := getImage(t, "fin-c"); held(gi) || len(gi.Status.Channels) != 0 {
		t.Errorf("fin-c, pointed at by no channel: finalizers %v, channels %v", gi.Finalizers, gi.Status.Channels)
	}

	if err := k8s.Delete(ctx, httpImage("fin-a")); err != nil {
		t.Fatal(err)
	}
	if gi := getImage(t, "fin-a"); gi.DeletionTimestamp.IsZero() {
		t.Fatal("fin-a is not being deleted")
	}
	pointAt(t, "fin-1", "fin-b")
	testutil.Eventually(t, "fin-a, Terminating, to list fin-2 only", func() bool {
		return slices.Equal(getImage(t, "fin-a").Status.Channels, []string{"fin-2"})
	})
	if gi := getImage(t, "fin-a"); !held(gi) {
		t.Fatalf("fin-a lost its finalizer while fin-2 points at it: %v", gi.Finalizers)
	}
	testutil.Eventually(t, "fin-b to list fin-0 and fin-1", func() bool {
		return slices.Equal(getImage(t, "fin-b").Status.Channels, []string{"fin-0", "fin-1"})
	})
	// The last channel goes: the image goes with its finalizer.
	if err := k8s.Delete(ctx, channel("fin-2", "")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "fin-a to go", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "fin-a"}, &thinlvmv1.GoldenImage{}))
	})

	// Both channels move on from fin-b: its finalizer goes at once.
	pointAt(t, "fin-0", "fin-c")
	pointAt(t, "fin-1", "fin-c")
	testutil.Eventually(t, "fin-b released, fin-c held", func() bool {
		b, c := getImage(t, "fin-b"), getImage(t, "fin-c")
		return !held(b) && len(b.Status.Channels) == 0 && held(c) && slices.Equal(c.Status.Channels, []string{"fin-0", "fin-1"})
	})
	// fin-b stays a version of both channels; a deleted channel's label
	// goes from every image that carries it.
	fin0 := getChannel(t, "fin-0")
	label0 := thinlvmv1.ChannelLabel(fin0.UID)
	for _, name := range []string{"fin-b", "fin-c"} {
		if gi := getImage(t, name); !hasLabel(gi, label0) {
			t.Errorf("%s does not carry fin-0's label %s: %v", name, label0, gi.Labels)
		}
	}
	if err := k8s.Delete(ctx, fin0); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "fin-0's label to go from fin-b and fin-c", func() bool {
		return !hasLabel(getImage(t, "fin-b"), label0) && !hasLabel(getImage(t, "fin-c"), label0)
	})
	if c := getImage(t, "fin-c"); !held(c) || !hasLabel(c, thinlvmv1.ChannelLabel(getChannel(t, "fin-1").UID)) {
		t.Errorf("fin-c, still pointed at by fin-1: finalizers %v, labels %v", c.Finalizers, c.Labels)
	}
	if err := k8s.Delete(ctx, channel("fin-1", "")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "fin-c released", func() bool {
		c := getImage(t, "fin-c")
		return !held(c) && len(c.Status.Channels) == 0 && len(c.Labels) == 0
	})
}

func hasLabel(gi *thinlvmv1.GoldenImage, key string) bool {
	_, ok := gi.Labels[key]
	return ok
}

// goldenVolume is a LogicalVolume made from image on node.
func goldenVolume(name, node, image string) *thinlvmv1.LogicalVolume {
	return &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: thinlvmv1.LogicalVolumeSpec{
		Name: name, NodeName: node, Size: resource.MustParse("1Gi"),
		Source: &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: image}}}
}

// A channel's status lists its current version first, then every earlier
// one that still exists, each with the nodes holding its base and the
// volumes made from it; a channel made again under the same name starts
// without history.
func TestChannelVersions(t *testing.T) {
	ctx := context.Background()
	// The volumes' nodes exist: the node cleanup deletes volumes of nodes
	// that do not.
	create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ver-n1"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ver-n2"}})
	create(t, httpImage("ver-1"), channel("os", "ver-1"))
	v1 := getImage(t, "ver-1")
	for _, n := range []string{"ver-n1", "ver-n2"} {
		setBases(t, n, thinlvmv1.GoldenBaseStatus{Name: "ver-1", LV: thinlvmv1.BaseLVName(v1), Size: v1.Spec.Size, State: thinlvmv1.GoldenBaseReady})
	}
	create(t, goldenVolume("ver-vol-1", "ver-n1", "ver-1"), goldenVolume("ver-vol-2", "ver-n2", "ver-1"),
		goldenVolume("ver-other", "ver-n2", "fin-x")) // of another image: counted nowhere here
	versions := func(want ...thinlvmv1.ChannelVersion) func() bool {
		return func() bool { return cmp.Diff(want, getChannel(t, "os").Status.Versions) == "" }
	}
	wantV1 := thinlvmv1.ChannelVersion{GoldenImage: "ver-1", ReadyNodes: 2, Nodes: []string{"ver-n1", "ver-n2"}, Volumes: 2}
	cur := func(v thinlvmv1.ChannelVersion) thinlvmv1.ChannelVersion { v.Current = true; return v }
	testutil.Eventually(t, "ver-1 current, on two nodes, with two volumes", versions(cur(wantV1)))
	if c := meta.FindStatusCondition(getChannel(t, "os").Status.Conditions, thinlvmv1.ConditionChannelReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v, want True", c)
	}

	create(t, httpImage("ver-2"))
	pointAt(t, "os", "ver-2")
	wantV2 := thinlvmv1.ChannelVersion{GoldenImage: "ver-2"}
	testutil.Eventually(t, "ver-2 current, then ver-1", versions(cur(wantV2), wantV1))
	if c := meta.FindStatusCondition(getChannel(t, "os").Status.Conditions, thinlvmv1.ConditionChannelReady); c == nil || c.Reason != thinlvmv1.ReasonNoReadyBase {
		t.Errorf("Ready %+v, want False, %s", c, thinlvmv1.ReasonNoReadyBase)
	}
	create(t, goldenVolume("ver-vol-3", "ver-n1", "ver-2"))
	wantV2.Volumes = 1
	testutil.Eventually(t, "ver-2's volume counted", versions(cur(wantV2), wantV1))
	// ver-1's base leaves ver-n2: the channel of that earlier version is
	// told by the node's update.
	setBases(t, "ver-n2")
	wantV1.ReadyNodes, wantV1.Nodes = 1, []string{"ver-n1"}
	testutil.Eventually(t, "ver-1 on one node", versions(cur(wantV2), wantV1))

	create(t, httpImage("ver-3"))
	pointAt(t, "os", "ver-3")
	wantV3 := thinlvmv1.ChannelVersion{GoldenImage: "ver-3"}
	testutil.Eventually(t, "ver-3 current, then ver-2 and ver-1", versions(cur(wantV3), wantV2, wantV1))

	// ver-1 goes (no channel points at it: nothing holds it); its volumes
	// stay, and so does the channel's history of the others.
	if err := k8s.Delete(ctx, httpImage("ver-1")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "ver-1 gone from the versions", versions(cur(wantV3), wantV2))
	if err := k8s.Delete(ctx, goldenVolume("ver-vol-3", "", "")); err != nil {
		t.Fatal(err)
	}
	wantV2.Volumes = 0
	testutil.Eventually(t, "ver-2's volume gone", versions(cur(wantV3), wantV2))

	// The channel points at an image that does not exist: Ready False and
	// a Warning; the image's appearance makes it a version like any other.
	pointAt(t, "os", "ver-missing")
	wantMissing := thinlvmv1.ChannelVersion{GoldenImage: "ver-missing"}
	testutil.Eventually(t, "ver-missing current", versions(cur(wantMissing), wantV3, wantV2))
	ch := getChannel(t, "os")
	if c := meta.FindStatusCondition(ch.Status.Conditions, thinlvmv1.ConditionChannelReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != thinlvmv1.ReasonGoldenImageNotFound {
		t.Errorf("Ready %+v, want False, %s", c, thinlvmv1.ReasonGoldenImageNotFound)
	}
	testutil.Eventually(t, "a GoldenImageNotFound Event on the channel", func() bool {
		list := &eventsv1.EventList{}
		if err := k8s.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "GoldenImageChannel" && e.Regarding.UID == ch.UID && e.Reason == thinlvmv1.ReasonGoldenImageNotFound && e.Type == corev1.EventTypeWarning {
				return true
			}
		}
		return false
	})
	create(t, httpImage("ver-missing"))
	testutil.Eventually(t, "ver-missing found", func() bool {
		c := meta.FindStatusCondition(getChannel(t, "os").Status.Conditions, thinlvmv1.ConditionChannelReady)
		return c != nil && c.Reason == thinlvmv1.ReasonNoReadyBase
	})

	// Made again under the same name: no history, and the old channel's
	// labels go.
	old := thinlvmv1.ChannelLabel(ch.UID)
	if err := k8s.Delete(ctx, ch); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the old channel gone", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "os"}, &thinlvmv1.GoldenImageChannel{}))
	})
	create(t, channel("os", "ver-3"))
	testutil.Eventually(t, "ver-3 current, alone", versions(cur(wantV3)))
	testutil.Eventually(t, "the old channel's labels gone", func() bool {
		return !hasLabel(getImage(t, "ver-2"), old) && !hasLabel(getImage(t, "ver-missing"), old) && !hasLabel(getImage(t, "ver-3"), old)
	})
}

// A status written from a cache that lagged leaves the server's status
// wrong with nothing else to change: a turn that compared its result with
// an older cached status found them equal and wrote nothing, or patched
// onto an older version and left fields it did not change as the server
// had them. This test makes that end state directly (the channel's and the
// image's statuses overwritten, nothing else touched) and wants both put
// right: the reconcilers look again at every change of their objects,
// their own status included.
func TestStatusLeftByALaggingCacheIsMended(t *testing.T) {
	ctx := context.Background()
	create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lag-n1"}})
	create(t, httpImage("lag-1"), channel("lag", "lag-1"))
	gi := getImage(t, "lag-1")
	setBases(t, "lag-n1", thinlvmv1.GoldenBaseStatus{Name: "lag-1", LV: thinlvmv1.BaseLVName(gi), Size: gi.Spec.Size, State: thinlvmv1.GoldenBaseReady})
	create(t, goldenVolume("lag-vol-1", "lag-n1", "lag-1"))
	want := []thinlvmv1.ChannelVersion{{GoldenImage: "lag-1", Current: true, ReadyNodes: 1, Nodes: []string{"lag-n1"}, Volumes: 1}}
	right := func() bool {
		img := getImage(t, "lag-1").Status
		return cmp.Diff(want, getChannel(t, "lag").Status.Versions) == "" && img.ReadyNodes == 1 && slices.Equal(img.Nodes, []string{"lag-n1"})
	}
	testutil.Eventually(t, "the channel's and the image's statuses", right)

	ch := getChannel(t, "lag")
	patch := client.MergeFrom(ch.DeepCopy())
	ch.Status.Versions = []thinlvmv1.ChannelVersion{{GoldenImage: "lag-1", Current: true}}
	if err := k8s.Status().Patch(ctx, ch, patch); err != nil {
		t.Fatal(err)
	}
	gi = getImage(t, "lag-1")
	patch = client.MergeFrom(gi.DeepCopy())
	gi.Status.ReadyNodes, gi.Status.Nodes = 0, nil
	if err := k8s.Status().Patch(ctx, gi, patch); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "both statuses mended, with nothing else changed", right)
}
