package csi

import (
	"cmp"
	"context"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/kubestatus"
)

// pickNode chooses the node of a new volume of class, want bytes, made
// from sourceNode's volume or snapshot or from image (either may be
// absent).
//
// A clone or restore lands where the requirements say (see forCopy): on
// its source's node it is an O(1) thin snapshot, on another node the node
// agent copies the data from the source's node.
//
// Requirements that name exactly one node are taken as the scheduler's
// choice. The deployment runs the provisioner with --strict-topology, so
// a WaitForFirstConsumer claim's request names only the node the
// scheduler picked, and the thinlvm plugin picked it counting the room that
// pods in flight hold, which the LVMNode read here may not show yet.
// Ranking and room are then the scheduler's and lvmd's to decide: a node
// without room fails the LogicalVolume with NoSpace, which CreateVolume
// answers with ResourceExhausted, and the provisioner gives the claim back
// to the scheduler. This controller never refuses that node from its own,
// possibly stale, view of its room; it refuses it with InvalidArgument only
// when the node reports its device classes and class is not among them,
// before anything is made.
//
// Otherwise (several nodes, as with Immediate binding, or none) place ranks
// the nodes by their LVMNodes.
func (s *ControllerServer) pickNode(ctx context.Context, ar *csi.TopologyRequirement, class string, want int64, sourceNode string, image *thinlvmv1.GoldenImage) (string, error) {
	candidates := topologyNodes(ar)
	if sourceNode != "" {
		if node, ok := forCopy(sourceNode, candidates); ok {
			return node, nil
		}
	}
	nodes, err := s.candidateNodes(ctx, candidates)
	if err != nil {
		return "", err
	}
	var images []*thinlvmv1.GoldenImage
	if image != nil {
		images = append(images, image)
	}
	return place(nodes, candidates, class, want, images)
}

// candidateNodes reads the LVMNodes place needs: the one candidate's by
// its name (an LVMNode is named after its node), the scheduler's choice of
// every WaitForFirstConsumer claim; otherwise every LVMNode in the cache,
// which place ranks (no candidates) or looks up (several: Immediate
// binding names every node the driver runs on). That walk is inherent
// to placing without the scheduler; it copies no object, and place only
// reads them. A candidate without an LVMNode is absent from the result.
func (s *ControllerServer) candidateNodes(ctx context.Context, candidates []string) ([]thinlvmv1.LVMNode, error) {
	if len(candidates) == 1 {
		node := thinlvmv1.LVMNode{}
		if err := s.Client.Get(ctx, types.NamespacedName{Name: candidates[0]}, &node); apierrors.IsNotFound(err) {
			return nil, nil
		} else if err != nil {
			return nil, kubestatus.Errorf(err, "get LVMNode %s", candidates[0])
		}
		return []thinlvmv1.LVMNode{node}, nil
	}
	nodes := &thinlvmv1.LVMNodeList{}
	if err := s.Client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, kubestatus.Errorf(err, "list LVMNodes")
	}
	return nodes.Items, nil
}

// topologyNodes are the nodes accessibility requirements name, preferred
// ones first, then requisite ones, each once.
func topologyNodes(ar *csi.TopologyRequirement) []string {
	var nodes []string
	for _, t := range append(append([]*csi.Topology{}, ar.GetPreferred()...), ar.GetRequisite()...) {
		if n := topologyNode(t); n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// forCopy places a clone or restore when the requirements decide: one
// candidate is the scheduler's choice (with WaitForFirstConsumer and
// --strict-topology), which weighed the source's node first and chose
// another only for a reason (room, the pod's other constraints), so the
// copy goes there; otherwise the source's node when the candidates (none
// means any node) include it. When they exclude it, place ranks the
// candidates by room, as for any new volume.
func forCopy(sourceNode string, candidates []string) (string, bool) {
	switch {
	case len(candidates) == 1:
		return candidates[0], true
	case len(candidates) == 0 || slices.Contains(candidates, sourceNode):
		return sourceNode, true
	}
	return "", false
}

// place chooses the node of a volume without a source from the LVMNodes,
// the candidates the requirements name (in order) and the golden images
// the volume is made from. Each node's status is read through its
// LVMNodeStatus methods, as the scheduler plugin reads it.
//
//   - Candidates that all report their device classes, none of them
//     class: InvalidArgument, before anything is made.
//   - One candidate: it, whatever its room (see pickNode).
//   - No candidates: every node reporting class, the most Room first.
//   - Then, with those holding every image's base Ready first, the first
//     candidate whose Room fits want, or that reports no capacity yet (no
//     LVMNode, or no device classes: lvmd decides); ResourceExhausted
//     when none does.
func place(nodes []thinlvmv1.LVMNode, candidates []string, class string, want int64, images []*thinlvmv1.GoldenImage) (string, error) {
	reports := make(map[string]*thinlvmv1.LVMNodeStatus, len(nodes))
	for i := range nodes {
		reports[nodes[i].Name] = &nodes[i].Status
	}
	// lacks tells whether a node reports its device classes, none of them
	// class: it could never make the LV.
	lacks := func(n string) bool {
		r := reports[n]
		return r != nil && len(r.DeviceClasses) > 0 && r.DeviceClass(class) == nil
	}
	if len(candidates) > 0 && !slices.ContainsFunc(candidates, func(n string) bool { return !lacks(n) }) {
		return "", status.Errorf(codes.InvalidArgument, "device class %q is not on node(s) %v", class, candidates)
	}
	if len(candidates) == 1 {
		return candidates[0], nil
	}
	if len(candidates) == 0 {
		room := map[string]int64{}
		for i := range nodes {
			if r, ok := nodes[i].Status.Room(class, images...); ok {
				candidates = append(candidates, nodes[i].Name)
				room[nodes[i].Name] = r
			}
		}
		if len(candidates) == 0 {
			return "", status.Errorf(codes.ResourceExhausted, "no node reports device class %q", class)
		}
		slices.SortStableFunc(candidates, func(a, b string) int { return cmp.Compare(room[b], room[a]) })
	}
	if len(images) > 0 {
		ready := map[string]bool{}
		for _, n := range candidates {
			ready[n] = reports[n] != nil && !slices.ContainsFunc(images, func(img *thinlvmv1.GoldenImage) bool {
				return reports[n].BaseState(img) != thinlvmv1.GoldenBaseReady
			})
		}
		slices.SortStableFunc(candidates, func(a, b string) int {
			switch {
			case ready[a] && !ready[b]:
				return -1
			case ready[b] && !ready[a]:
				return 1
			}
			return 0
		})
	}
	for _, n := range candidates {
		if lacks(n) {
			continue
		}
		r := reports[n]
		if r == nil {
			return n, nil
		}
		if room, ok := r.Room(class, images...); !ok || room >= want {
			return n, nil
		}
	}
	return "", status.Errorf(codes.ResourceExhausted, "no node of %v has %d bytes available in device class %q", candidates, want, class)
}
