package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// NodeClass is one device class of one node, as `nodes` shows it.
type NodeClass struct {
	Node        string `json:"node"`
	DeviceClass string `json:"deviceClass"`
	Default     bool   `json:"default,omitempty"`
	// Type is "thick" for a class without a thin pool.
	Type        string `json:"type,omitempty"`
	VolumeGroup string `json:"volumeGroup"`
	ThinPool    string `json:"thinPool"`
	// Capacity is the thin pool's size (a thick class's: the volume
	// group's); Used, what its data takes (the VG's allocated extents).
	Capacity resource.Quantity `json:"capacity"`
	Used     resource.Quantity `json:"used"`
	// Virtual is the thin LVs' sizes added up; Available, what new volumes
	// may still take under the overprovision ratio.
	Virtual            resource.Quantity `json:"virtual"`
	Available          resource.Quantity `json:"available"`
	OverprovisionRatio string            `json:"overprovisionRatio"`
	DataPercent        string            `json:"dataPercent"`
	MetadataPercent    string            `json:"metadataPercent"`
	LVs                int32             `json:"lvs"`
	// VGMetadataLVsLeft is how many more LVs the VG's metadata area holds
	// (absent when the node agent does not report it).
	VGMetadataLVsLeft *int32 `json:"vgMetadataLVsLeft,omitempty"`
	// GoldenBases are the golden images whose base the node holds in this
	// class, Ready or populating.
	GoldenBases []string `json:"goldenBases,omitempty"`
	// Health is Ready, or why the class takes no new volumes.
	Health   string   `json:"health"`
	Warnings []string `json:"warnings,omitempty"`
}

func newNodesCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "nodes [NODE...]",
		Short: "Capacity, use and health of each node's device classes, with the warnings thinlvm's alerts raise",
		RunE: func(cmd *cobra.Command, args []string) error {
			return nodes(cmd.Context(), o, args)
		},
	}
}

func nodes(ctx context.Context, o *options, names []string) error {
	c, err := o.client()
	if err != nil {
		return err
	}
	list := &thinlvmv1.LVMNodeList{}
	if err := c.List(ctx, list); err != nil {
		return fmt.Errorf("listing LVMNodes: %w", err)
	}
	r := report[NodeClass]{
		columns: []metav1.TableColumnDefinition{
			column("Node", "The node.", false),
			column("Class", "The device class.", false),
			column("Capacity", "The thin pool's size.", false),
			column("Used", "What the thin pool's data takes.", false),
			column("Available", "What new volumes may still take (the overprovision ratio applied).", false),
			column("Data%", "The thin pool's data use.", false),
			column("Meta%", "The thin pool's metadata use.", false),
			column("LVs-Left", "How many more LVs the VG's metadata area holds.", false),
			column("Bases", "The golden bases held.", false),
			column("Health", "Ready, or why the class takes no new volumes.", false),
			column("VG", "The volume group.", true),
			column("Pool", "The thin pool.", true),
			column("Virtual", "The thin LVs' sizes added up.", true),
			column("Overprovision", "The overprovision ratio.", true),
			column("LVs", "The LVs in the class.", true),
		},
		row: func(n NodeClass) []any {
			left := "-"
			if n.VGMetadataLVsLeft != nil {
				left = strconv.Itoa(int(*n.VGMetadataLVsLeft))
			}
			class, pool := n.DeviceClass, n.ThinPool
			if n.Type == string(thinlvmv1.DeviceClassThick) {
				pool = "(thick)"
			}
			if n.Default {
				class += " (default)"
			}
			return []any{n.Node, class, n.Capacity.String(), n.Used.String(), n.Available.String(), n.DataPercent, n.MetadataPercent,
				left, strconv.Itoa(len(n.GoldenBases)), n.Health, n.VolumeGroup, pool, n.Virtual.String(), n.OverprovisionRatio, strconv.Itoa(int(n.LVs))}
		},
	}
	for i := range list.Items {
		ln := &list.Items[i]
		if len(names) > 0 && !slices.Contains(names, ln.Name) {
			continue
		}
		for _, dc := range ln.Status.DeviceClasses {
			n := nodeClass(ln, dc)
			for _, w := range n.Warnings {
				r.warnings = append(r.warnings, fmt.Sprintf("node %s, device class %s: %s", n.Node, n.DeviceClass, w))
			}
			r.items = append(r.items, n)
		}
		if len(ln.Status.DeviceClasses) == 0 {
			r.warnings = append(r.warnings, fmt.Sprintf("node %s reports no device class (has its node agent started?)", ln.Name))
		}
	}
	for _, name := range names {
		if !slices.ContainsFunc(list.Items, func(ln thinlvmv1.LVMNode) bool { return ln.Name == name }) {
			return fmt.Errorf("node %s has no LVMNode: thinlvm does not run there", name)
		}
	}
	return show(o, r)
}

// nodeClass is what `nodes` shows of one device class, with the warnings
// the alerts of deploy/monitoring would raise from the same figures. (A
// stale report is the one alert it cannot tell: the agent writes its
// LVMNode only on change, so its age says nothing.)
func nodeClass(ln *thinlvmv1.LVMNode, dc thinlvmv1.DeviceClassStatus) NodeClass {
	n := NodeClass{Node: ln.Name, DeviceClass: dc.Name, Default: dc.Default, VolumeGroup: dc.VolumeGroup, ThinPool: dc.ThinPool,
		Capacity: dc.PoolSize, Used: dc.DataUsed, Virtual: dc.Virtual, Available: dc.Available, OverprovisionRatio: dc.OverprovisionRatio,
		DataPercent: dc.DataPercent, MetadataPercent: dc.MetadataPercent, LVs: dc.LVCount, Health: "Ready"}
	if dc.Type == thinlvmv1.DeviceClassThick {
		n.Type, n.Capacity = string(dc.Type), dc.VGSize
		n.Used = dc.VGSize.DeepCopy()
		n.Used.Sub(dc.VGFree)
	}
	for _, b := range ln.Status.GoldenBases {
		if in := ln.Status.DeviceClass(b.DeviceClass); in == nil || in.Name != dc.Name {
			continue
		}
		if b.State == thinlvmv1.GoldenBaseFailed {
			n.Warnings = append(n.Warnings, fmt.Sprintf("the golden base of %s failed: %s (ThinLVMGoldenPopulationFailed)", b.Name, b.Message))
		} else {
			n.GoldenBases = append(n.GoldenBases, b.Name)
		}
	}
	warn := func(format string, args ...any) { n.Warnings = append(n.Warnings, fmt.Sprintf(format, args...)) }
	switch {
	case dc.Unavailable != "":
		n.Health = "Unavailable: " + dc.Unavailable
		warn("unavailable: %s (ThinLVMDeviceClassUnavailable)", dc.Unavailable)
	case dc.PoolHealth != "":
		n.Health = string(dc.PoolHealth)
		warn("thin pool %s/%s is %s (ThinLVMPoolFull)", dc.VolumeGroup, dc.ThinPool, dc.PoolHealth)
	case dc.OverHighWatermark:
		n.Health = "OverHighWatermark"
		warn("thin pool %s/%s is over its high-water mark: it takes no new volumes (ThinLVMPoolOverHighWatermark)", dc.VolumeGroup, dc.ThinPool)
	}
	if percent(dc.DataPercent) > 80 {
		warn("thin pool data %s%% used, over 80%% (ThinLVMPoolDataHigh)", dc.DataPercent)
	}
	if percent(dc.MetadataPercent) > 70 {
		warn("thin pool metadata %s%% used, over 70%% (ThinLVMPoolMetadataHigh)", dc.MetadataPercent)
	}
	if dc.Unavailable == "" && dc.Available.IsZero() {
		warn("no room for a new volume (ThinLVMNoRoom)")
	}
	if m := dc.VGMetadata; m != nil {
		left := m.LVsLeft
		n.VGMetadataLVsLeft = &left
		if left < 100 && !m.Size.IsZero() {
			warn("the VG's metadata area holds %d more LVs, fewer than 100 (ThinLVMVGMetadataNearlyFull)", left)
		}
	}
	return n
}

// percent is lvm's percentage ("12.50"), 0 when empty or unreadable.
func percent(s string) float64 {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0
	}
	return f
}
