package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// Image is one GoldenImage, as `images` shows it: where its base is held
// and how many volumes were made from it.
type Image struct {
	Name string `json:"name"`
	// Channels name the GoldenImageChannels this image is a version of,
	// "(current)" after the ones it is the current version of.
	Channels []string `json:"channels,omitempty"`
	Size     string   `json:"size,omitempty"`
	Source   string   `json:"source"`
	// Ready, Populating and Failed are the nodes whose base is in that
	// state, from the nodes' LVMNodes.
	Ready      []string `json:"ready,omitempty"`
	Populating []string `json:"populating,omitempty"`
	Failed     []string `json:"failed,omitempty"`
	// Volumes are the volumes made from this image's base.
	Volumes int `json:"volumes"`
	// Condition is the image's Ready condition: its reason, or Ready.
	Condition string `json:"condition"`
}

func newImagesCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "images [IMAGE...]",
		Short: "Golden images and channel versions: the nodes holding each base (Ready, populating, failed), the volumes made from it",
		RunE: func(cmd *cobra.Command, args []string) error {
			return images(cmd.Context(), o, args)
		},
	}
}

func images(ctx context.Context, o *options, names []string) error {
	c, err := o.client()
	if err != nil {
		return err
	}
	gis := &thinlvmv1.GoldenImageList{}
	if err := c.List(ctx, gis); err != nil {
		return fmt.Errorf("listing GoldenImages: %w", err)
	}
	channels := &thinlvmv1.GoldenImageChannelList{}
	if err := c.List(ctx, channels); err != nil {
		return fmt.Errorf("listing GoldenImageChannels: %w", err)
	}
	lvmNodes := &thinlvmv1.LVMNodeList{}
	if err := c.List(ctx, lvmNodes); err != nil {
		return fmt.Errorf("listing LVMNodes: %w", err)
	}
	lvs := &thinlvmv1.LogicalVolumeList{}
	if err := c.List(ctx, lvs); err != nil {
		return fmt.Errorf("listing LogicalVolumes: %w", err)
	}
	made := map[string]int{}
	for _, lv := range lvs.Items {
		if s := lv.Spec.Source; s != nil && s.Kind == thinlvmv1.SourceGoldenImage && lv.Spec.Role != thinlvmv1.RoleSnapshot {
			made[s.Name]++
		}
	}
	r := report[Image]{
		columns: []metav1.TableColumnDefinition{
			column("Name", "The GoldenImage.", false),
			column("Channels", "The channels it is a version of.", false),
			column("Ready", "Nodes whose base is Ready.", false),
			column("Populating", "Nodes populating its base.", false),
			column("Failed", "Nodes whose base failed.", false),
			column("Volumes", "Volumes made from its base.", false),
			column("Condition", "Its Ready condition.", false),
			column("Size", "The base's size.", true),
			column("Source", "Where its data comes from.", true),
			column("Nodes", "The nodes holding its base, Ready.", true),
		},
		row: func(im Image) []any {
			return []any{im.Name, dash(strings.Join(im.Channels, ",")), strconv.Itoa(len(im.Ready)), strconv.Itoa(len(im.Populating)),
				strconv.Itoa(len(im.Failed)), strconv.Itoa(im.Volumes), im.Condition, dash(im.Size), im.Source, dash(strings.Join(im.Ready, ","))}
		},
	}
	for i := range gis.Items {
		gi := &gis.Items[i]
		if len(names) > 0 && !slices.Contains(names, gi.Name) {
			continue
		}
		im := Image{Name: gi.Name, Source: source(gi.Spec.Source), Volumes: made[gi.Name], Condition: "-"}
		if !gi.Spec.Size.IsZero() {
			im.Size = gi.Spec.Size.String()
		}
		for _, ch := range channels.Items {
			for _, v := range ch.Status.Versions {
				if v.GoldenImage == gi.Name {
					name := ch.Name
					if v.Current {
						name += " (current)"
					}
					im.Channels = append(im.Channels, name)
				}
			}
		}
		for _, ln := range lvmNodes.Items {
			switch ln.Status.BaseState(gi) {
			case thinlvmv1.GoldenBaseReady:
				im.Ready = append(im.Ready, ln.Name)
			case thinlvmv1.GoldenBasePopulating:
				im.Populating = append(im.Populating, ln.Name)
			case thinlvmv1.GoldenBaseFailed:
				im.Failed = append(im.Failed, ln.Name)
			}
		}
		if cond := meta.FindStatusCondition(gi.Status.Conditions, thinlvmv1.ConditionImageReady); cond != nil {
			im.Condition = cond.Reason
		}
		r.items = append(r.items, im)
		for _, n := range im.Failed {
			r.warnings = append(r.warnings, fmt.Sprintf("golden image %s: its base failed on node %s (ThinLVMGoldenPopulationFailed)", gi.Name, n))
		}
	}
	for _, name := range names {
		if !slices.ContainsFunc(gis.Items, func(gi thinlvmv1.GoldenImage) bool { return gi.Name == name }) {
			return fmt.Errorf("GoldenImage %s not found", name)
		}
	}
	return show(o, r)
}

// source says where an image's data comes from.
func source(s thinlvmv1.ImageSource) string {
	switch {
	case s.HTTP != nil:
		return "http " + redact(s.HTTP.URL)
	case s.Registry != nil:
		return "registry " + s.Registry.Image
	case s.PVC != nil:
		return "claim " + s.PVC.Namespace + "/" + s.PVC.Name
	case s.VolumeSnapshot != nil:
		return "snapshot " + s.VolumeSnapshot.Namespace + "/" + s.VolumeSnapshot.Name
	}
	return "-"
}

// redact is a URL without its query (presigned URLs carry signatures
// there) and user info.
func redact(raw string) string {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	if scheme, rest, ok := strings.Cut(raw, "://"); ok {
		if at := strings.Index(rest, "@"); at >= 0 && at < strings.IndexByte(rest+"/", '/') {
			rest = rest[at+1:]
		}
		raw = scheme + "://" + rest
	}
	return raw
}
