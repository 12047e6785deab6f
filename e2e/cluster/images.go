package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// ImageState tells where a GoldenImage's bases are, for a failed wait's
// message: its status, each LVMNode's entry for it and the newest Events
// about it. A suite's log shows only its tail, and the agents' logs there
// end with the last node's.
func (c *Cluster) ImageState(ctx context.Context, image string) string {
	var b strings.Builder
	gi := &thinlvmv1.GoldenImage{}
	if err := c.Client.Get(ctx, types.NamespacedName{Name: image}, gi); err != nil {
		fmt.Fprintf(&b, "GoldenImage %s: %v\n", image, err)
	} else {
		st := gi.Status
		fmt.Fprintf(&b, "GoldenImage %s: ready %d %v, populating %d, failed %d, last error %q\n",
			image, st.ReadyNodes, st.Nodes, st.PopulatingNodes, st.FailedNodes, st.LastError)
	}
	nodes := &thinlvmv1.LVMNodeList{}
	if err := c.Client.List(ctx, nodes); err != nil {
		fmt.Fprintf(&b, "LVMNodes: %v\n", err)
	}
	for _, n := range nodes.Items {
		for _, base := range n.Status.GoldenBases {
			if base.Name == image {
				fmt.Fprintf(&b, "LVMNode %s: %s from %q, %d of %d bytes, %q\n", n.Name, base.State, base.From, base.BytesDone, base.BytesTotal, base.Message)
			}
		}
	}
	evs := &eventsv1.EventList{}
	if err := c.Client.List(ctx, evs, client.MatchingFields{"regarding.name": image}); err != nil {
		fmt.Fprintf(&b, "Events: %v\n", err)
	}
	slices.SortFunc(evs.Items, func(x, y eventsv1.Event) int { return x.EventTime.Compare(y.EventTime.Time) })
	for _, e := range evs.Items[max(0, len(evs.Items)-6):] {
		fmt.Fprintf(&b, "Event %s %s: %s %s\n", e.EventTime.UTC().Format("15:04:05"), e.Regarding.Kind, e.Reason, e.Note)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
