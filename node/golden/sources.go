package golden

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/directio"
	"github.com/thinlvm/thinlvm/node/diskimage"
	"github.com/thinlvm/thinlvm/node/transfer"
)

// Where a base's data comes from, in order:
//
//  1. The source volume, on its node, for an image taken from a thinlvm
//     claim or snapshot: the base is a thin snapshot of it (O(1)).
//  2. A peer: a node whose base of the image is Ready (the GoldenImage's
//     status.nodes) sends what its base maps, over the transfer endpoint.
//     A peer that sends as many bases as it may refuses, and the next is
//     asked; when all are busy the population waits and asks again, so
//     late nodes copy from early ones and a prewarm of many nodes spreads
//     as a tree.
//  3. The origin (the image's URL or registry), when no node holds the
//     base: one node at a time, the holder of the image's Lease; the
//     others wait for it and then copy from it. A node falls back to the
//     origin after maxPeerFailures failed copies from peers.
//
// Every base is hashed whole once written (ContentSHA256, kept in an lvm
// tag and published in the LVMNode), and a copy from a peer must hash as
// the peer's does.

// maxPeerFailures is how many failed copies from peers make a population
// of a downloadable image fall back to the origin.
const maxPeerFailures = 3

// Tags of a sealed base: its content's checksum (hashDevice) and where
// it came from, so that a restarted agent publishes them again. A base
// sealed by an agent before the chunked digest has only an "sha256:" tag
// (the SHA-256 of all its bytes): it is published with no checksum, and
// served to no peer: those copy from another node, or download.
const (
	sha256TagPrefix = "content-sha256:"
	fromTagPrefix   = "from:"
)

// sealedTags reads a sealed base's from and checksum tags.
func sealedTags(base *pb.LogicalVolume) (from, sum string) {
	for _, t := range base.GetTags() {
		if v, ok := strings.CutPrefix(t, fromTagPrefix); ok {
			from = v
		}
		if v, ok := strings.CutPrefix(t, sha256TagPrefix); ok {
			sum = v
		}
	}
	return from, sum
}

// fill makes the base from the first source that can serve it, waiting
// while none can.
func (r *Reconciler) fill(ctx context.Context, gi *thinlvmv1.GoldenImage, pop *population) (int64, error) {
	logger := log.FromContext(ctx)
	failures := 0
	var lastErr error
	for {
		cur := &thinlvmv1.GoldenImage{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: gi.Name}, cur); err != nil {
			return 0, fmt.Errorf("get GoldenImage %s: %w", gi.Name, err)
		}
		if cur.UID != gi.UID {
			return 0, fmt.Errorf("GoldenImage %s was made again", gi.Name)
		}
		n, waiting, err := r.fillOnce(ctx, cur, pop, failures)
		switch {
		case err == nil && waiting == "":
			return n, nil
		case err == nil:
			pop.set("", waiting)
		case errors.Is(err, errPeer) && (failures+1 < maxPeerFailures || !cur.Spec.Source.FromVolume()):
			failures++
			lastErr = err
			logger.Info("copy from a peer failed", "failures", failures, "error", err.Error())
			pop.set("", "")
			continue // at once: the next peer, or after maxPeerFailures the origin
		default:
			return 0, errors.Join(err, lastErr)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(r.waitInterval()):
		}
	}
}

// checkThin refuses, for good, a golden image whose device class is thick
// on this node: its VM disks are thin snapshots of the base, which a thick
// class has not.
func (r *Reconciler) checkThin(ctx context.Context, gi *thinlvmv1.GoldenImage) error {
	ln := &thinlvmv1.LVMNode{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: r.NodeName}, ln); err != nil {
		return client.IgnoreNotFound(err) // not published yet: lvmd's own refusal stands behind
	}
	if dc := ln.Status.DeviceClass(gi.Spec.DeviceClass); dc != nil && dc.Type == thinlvmv1.DeviceClassThick {
		return fmt.Errorf("%w: device class %s is thick on node %s: a golden image's disks are thin snapshots of its base, so it needs a thin device class",
			diskimage.ErrPermanent, dc.Name, r.NodeName)
	}
	return nil
}

// errPeer marks a failed copy from a peer.
var errPeer = errors.New("copy from a peer")

// fillOnce makes the base from the first source that can serve it now, or
// says why the population waits: for something another party does, not a
// failure.
func (r *Reconciler) fillOnce(ctx context.Context, gi *thinlvmv1.GoldenImage, pop *population, failures int) (n int64, waiting string, err error) {
	if err := r.checkThin(ctx, gi); err != nil {
		return 0, "", err
	}
	src := &gi.Spec.Source
	if src.FromVolume() {
		sv := gi.Status.SourceVolume
		if sv == nil {
			return 0, "waiting for the controller to resolve the source volume", nil
		}
		if sv.NodeName == r.NodeName {
			pop.set(thinlvmv1.BaseFromVolume, "")
			n, err := r.fromVolume(ctx, gi, sv)
			return n, "", err
		}
		if r.Copier == nil {
			return 0, "", fmt.Errorf("%w: the image is taken from a volume on node %s, and this node copies no bases from other nodes (--golden-peers=false, or no transfer endpoint)", diskimage.ErrPermanent, sv.NodeName)
		}
	}
	if r.Copier != nil && (failures < maxPeerFailures || src.FromVolume()) {
		n, waiting, err := r.fromPeers(ctx, gi, pop)
		if err != nil || waiting == "" {
			return n, "", err
		}
		if src.FromVolume() || len(gi.Status.Nodes) > 0 {
			return 0, waiting, nil // holders exist, all busy; or only peers can serve
		}
		holder, err := r.takeLease(ctx, gi)
		switch {
		case err != nil:
			return 0, "", err
		case holder == "":
			return 0, "waiting: another node took the image's origin Lease", nil
		case holder != r.NodeName:
			return 0, fmt.Sprintf("waiting for node %s, which downloads the image from its origin", holder), nil
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go r.renewLease(ctx, gi)
	}
	pop.set(thinlvmv1.BaseFromOrigin, "")
	n, err = r.fromOrigin(ctx, gi, pop)
	if err != nil && r.Copier != nil {
		r.dropLease(ctx, gi) // another node may try at once
	}
	return n, "", err
}

// fromOrigin downloads the image into a new base.
func (r *Reconciler) fromOrigin(ctx context.Context, gi *thinlvmv1.GoldenImage, pop *population) (int64, error) {
	lvName := thinlvmv1.BaseLVName(gi)
	resp, err := r.LVMD.CreateLV(ctx, &pb.CreateLVRequest{Name: lvName, DeviceClass: gi.Spec.DeviceClass,
		SizeBytes: uint64(gi.Spec.Size.Value()), Tags: []string{thinlvmv1.BaseTagPrefix + gi.Name}})
	if err != nil {
		return 0, fmt.Errorf("create base lv %s: %w", lvName, err)
	}
	vol := resp.GetVolume()
	n, err := r.Writer.Populate(ctx, &gi.Spec, vol.GetDevicePath(), int64(vol.GetSizeBytes()), &pop.prog)
	if err != nil {
		return 0, r.discard(ctx, vol, err)
	}
	return n, r.seal(ctx, vol, thinlvmv1.BaseFromOrigin, "")
}

// fromVolume makes the base a thin snapshot of the source volume, which is
// on this node.
func (r *Reconciler) fromVolume(ctx context.Context, gi *thinlvmv1.GoldenImage, sv *thinlvmv1.SourceVolumeStatus) (int64, error) {
	lvName := thinlvmv1.BaseLVName(gi)
	srcLV := thinlvmv1.LVNameOf(sv.LogicalVolume)
	got, err := r.LVMD.GetLV(ctx, &pb.GetLVRequest{Name: srcLV, DeviceClass: gi.Spec.DeviceClass})
	if err != nil {
		return 0, fmt.Errorf("get the source volume's LV %s: %w", srcLV, err)
	}
	if !slices.Contains(got.GetVolume().GetTags(), thinlvmv1.OwnerTagPrefix+sv.LogicalVolume) {
		return 0, fmt.Errorf("%w: LV %s is not the LV of LogicalVolume %s", diskimage.ErrPermanent, srcLV, sv.LogicalVolume)
	}
	want := gi.BaseSize()
	if got.GetVolume().GetSizeBytes() > uint64(want.Value()) {
		// Grown since the controller resolved it: volumes of the image are
		// made at least want large, and a snapshot cannot be smaller than
		// its base.
		return 0, fmt.Errorf("%w: the source volume %s is %d bytes, larger than the image's %s; make a GoldenImage with a size at least that large",
			diskimage.ErrPermanent, sv.LogicalVolume, got.GetVolume().GetSizeBytes(), want.String())
	}
	size := uint64(want.Value())
	resp, err := r.LVMD.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: lvName, DeviceClass: gi.Spec.DeviceClass, SourceName: srcLV,
		SizeBytes: size, Tags: []string{thinlvmv1.BaseTagPrefix + gi.Name}})
	if err != nil {
		return 0, fmt.Errorf("snapshot %s as base %s: %w", srcLV, lvName, err)
	}
	vol := resp.GetVolume()
	return int64(vol.GetSizeBytes()), r.seal(ctx, vol, thinlvmv1.BaseFromVolume, "")
}

// fromPeers copies the base from a node that holds it Ready. It says why
// it waits when no node holds it or all that do are busy, and fails with
// errPeer when the copy failed.
func (r *Reconciler) fromPeers(ctx context.Context, gi *thinlvmv1.GoldenImage, pop *population) (n int64, waiting string, err error) {
	var peers []string
	for _, n := range gi.Status.Nodes {
		if n != r.NodeName {
			peers = append(peers, n)
		}
	}
	if len(peers) == 0 {
		return 0, "waiting for a node that holds the base", nil
	}
	rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	for _, peer := range peers {
		sess, open, err := r.Copier.OpenBase(ctx, peer, gi.Name, string(gi.UID))
		if status.Code(err) == codes.ResourceExhausted {
			continue
		}
		if err != nil {
			return 0, "", fmt.Errorf("%w: %w", errPeer, err)
		}
		pop.set(peer, "")
		n, err := r.copyFrom(ctx, gi, pop, sess, open.GetSizeBytes(), open.GetContentSha256(), peer)
		if cerr := sess.Close(context.WithoutCancel(ctx)); cerr != nil {
			log.FromContext(ctx).Info("closing the copy failed; the peer's sweep removes its snapshot", "peer", peer, "error", cerr.Error())
		}
		return n, "", err
	}
	return 0, fmt.Sprintf("waiting: the %d nodes that hold the base send as many copies as they may", len(peers)), nil
}

func (r *Reconciler) copyFrom(ctx context.Context, gi *thinlvmv1.GoldenImage, pop *population, sess *transfer.Session, size uint64, sum, peer string) (int64, error) {
	want := gi.BaseSize()
	if sum == "" || size == 0 || size < uint64(want.Value()) {
		return 0, fmt.Errorf("%w: node %s offers a base of %d bytes with checksum %q; this node's is %s", errPeer, peer, size, sum, want.String())
	}
	lvName := thinlvmv1.BaseLVName(gi)
	resp, err := r.LVMD.CreateLV(ctx, &pb.CreateLVRequest{Name: lvName, DeviceClass: gi.Spec.DeviceClass,
		SizeBytes: size, Tags: []string{thinlvmv1.BaseTagPrefix + gi.Name}})
	if err != nil {
		return 0, fmt.Errorf("create base lv %s: %w", lvName, err)
	}
	vol := resp.GetVolume()
	if vol.GetSizeBytes() != size {
		return 0, r.discard(ctx, vol, fmt.Errorf("%w: node %s's base is %d bytes, this node's would be %d", errPeer, peer, size, vol.GetSizeBytes()))
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p := sess.Progress()
				pop.prog.Done.Store(p.Done)
				pop.prog.Total.Store(p.Total)
			}
		}
	}()
	err = sess.CopyTo(ctx, vol.GetDevicePath(), false)
	close(done)
	p := sess.Progress()
	pop.prog.Done.Store(p.Done)
	pop.prog.Total.Store(p.Total)
	if err != nil {
		return 0, r.discard(ctx, vol, fmt.Errorf("%w: from node %s: %w", errPeer, peer, err))
	}
	if err := r.seal(ctx, vol, peer, sum); err != nil {
		if errors.Is(err, errMismatch) {
			err = fmt.Errorf("%w: %w", errPeer, err)
		}
		return 0, err
	}
	return p.Done, nil
}

// errMismatch marks a copy whose checksum differs from its source's.
var errMismatch = errors.New("checksum mismatch")

// seal hashes the base's bytes (checking them against want, when set),
// then makes it read-only and inactive with its checksum and origin in its
// tags. On failure it removes the base.
func (r *Reconciler) seal(ctx context.Context, vol *pb.LogicalVolume, from, want string) error {
	sum, err := hashDevice(ctx, vol.GetDevicePath(), int64(vol.GetSizeBytes()))
	if err != nil {
		return r.discard(ctx, vol, err)
	}
	if want != "" && sum != want {
		return r.discard(ctx, vol, fmt.Errorf("%w: the copy of the base hashes to %s, its source's to %s", errMismatch, sum, want))
	}
	if _, err := r.LVMD.ChangeLV(ctx, &pb.ChangeLVRequest{Name: vol.GetName(), DeviceClass: vol.GetDeviceClass(),
		AddTags: []string{sha256TagPrefix + sum, fromTagPrefix + from}, ReadOnly: ptr.To(true), Active: ptr.To(false)}); err != nil {
		return r.discard(ctx, vol, fmt.Errorf("seal base %s: %w", vol.GetName(), err))
	}
	return nil
}

// discard removes a base that was not sealed: no half-written base is ever
// read-only.
func (r *Reconciler) discard(ctx context.Context, vol *pb.LogicalVolume, err error) error {
	if _, rerr := r.LVMD.RemoveLV(context.WithoutCancel(ctx), &pb.RemoveLVRequest{Name: vol.GetName(), DeviceClass: vol.GetDeviceClass()}); rerr != nil && status.Code(rerr) != codes.NotFound {
		err = errors.Join(err, fmt.Errorf("remove the half-written base: %w", rerr))
	}
	return err
}

// contentChunk is the unit of a base's content digest (hashDevice).
const contentChunk = 4 << 20

// hashDevice is the content digest (contentSHA256) of the first size bytes
// of a device, read with O_DIRECT: the hex SHA-256 of the SHA-256 digests
// of its bytes in chunks of contentChunk bytes, in order (the last chunk
// may be shorter). It is a function of the bytes alone, whatever maps
// them. Equivalent to:
//
//	split -b 4M --filter='sha256sum | head -c 64 | xxd -r -p' /dev/vg/base | sha256sum
//
// A chunk of zeros is recognised and its digest, worked out once, reused:
// most of a base is such chunks (the base does not map them; an image is
// smaller than its base, and sparse), and SHA-256 is the cost of a seal.
// Where it runs slowly (a VM without hardware SHA, an emulated CPU),
// hashing the zeros of a 4 GiB base took over four minutes, scanning them
// ten seconds.
func hashDevice(ctx context.Context, path string, size int64) (string, error) {
	dev, err := directio.Open(path, os.O_RDONLY)
	if err != nil {
		return "", err
	}
	defer dev.Close()
	h := sha256.New()
	buf, zero := directio.Buffer(contentChunk), make([]byte, contentChunk)
	var zeroSum []byte
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n, err := dev.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		switch c := buf[:n]; {
		case n == contentChunk && bytes.Equal(c, zero):
			if zeroSum == nil {
				s := sha256.Sum256(zero)
				zeroSum = s[:]
			}
			h.Write(zeroSum)
		case n > 0:
			s := sha256.Sum256(c)
			h.Write(s[:])
		}
		off += int64(n)
		if err == io.EOF && off < size {
			return "", fmt.Errorf("hash %s: it ends at %d bytes, not %d", path, off, size)
		}
		if err != nil && err != io.EOF {
			return "", fmt.Errorf("hash %s at %d: %w", path, off, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (r *Reconciler) waitInterval() time.Duration {
	if r.WaitInterval > 0 {
		return r.WaitInterval
	}
	return 3 * time.Second
}

func (r *Reconciler) leaseDuration() time.Duration {
	if r.LeaseDuration > 0 {
		return r.LeaseDuration
	}
	return 30 * time.Second
}

// leaseName is the name of the Lease whose holder downloads the image from
// its origin.
func leaseName(gi *thinlvmv1.GoldenImage) string { return "thinlvm-origin-" + string(gi.UID) }

// takeLease takes the image's origin Lease when it is free, expired, or
// this node's, and returns its holder: "" when another node took it
// between the read and the write.
func (r *Reconciler) takeLease(ctx context.Context, gi *thinlvmv1.GoldenImage) (string, error) {
	now := metav1.NewMicroTime(time.Now())
	secs := int32(r.leaseDuration() / time.Second)
	l := &coordinationv1.Lease{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: leaseName(gi)}, l)
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: leaseName(gi),
				// Deleted with its GoldenImage.
				OwnerReferences: []metav1.OwnerReference{{APIVersion: thinlvmv1.GroupVersion.String(), Kind: thinlvmv1.KindGoldenImage, Name: gi.Name, UID: gi.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(r.NodeName), LeaseDurationSeconds: ptr.To(secs), AcquireTime: &now, RenewTime: &now},
		}
		if err := r.Client.Create(ctx, l); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return "", nil
			}
			return "", fmt.Errorf("create Lease %s/%s: %w", r.Namespace, l.Name, err)
		}
		return r.NodeName, nil
	}
	if err != nil {
		return "", fmt.Errorf("get Lease %s/%s: %w", r.Namespace, leaseName(gi), err)
	}
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	if holder != r.NodeName && holder != "" && l.Spec.RenewTime != nil &&
		time.Since(l.Spec.RenewTime.Time) < time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, secs))*time.Second {
		return holder, nil
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = ptr.To(r.NodeName), ptr.To(secs), &now, &now
	if err := r.Client.Update(ctx, l); err != nil {
		if apierrors.IsConflict(err) {
			return "", nil
		}
		return "", fmt.Errorf("take Lease %s/%s: %w", r.Namespace, l.Name, err)
	}
	return r.NodeName, nil
}

// renewLease renews the image's Lease until ctx ends. After a download the
// Lease is left to expire: by then the base is Ready and the others copy
// it from this node.
func (r *Reconciler) renewLease(ctx context.Context, gi *thinlvmv1.GoldenImage) {
	t := time.NewTicker(r.leaseDuration() / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l := &coordinationv1.Lease{}
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: leaseName(gi)}, l)
		if err == nil && ptr.Deref(l.Spec.HolderIdentity, "") == r.NodeName {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			err = r.Client.Update(ctx, l)
		}
		if err != nil && ctx.Err() == nil {
			log.FromContext(ctx).Info("renew the origin Lease failed", "lease", leaseName(gi), "error", err.Error())
		}
	}
}

// dropLease deletes the image's Lease if this node holds it.
func (r *Reconciler) dropLease(ctx context.Context, gi *thinlvmv1.GoldenImage) {
	ctx = context.WithoutCancel(ctx)
	l := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: leaseName(gi)}, l); err != nil {
		return
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != r.NodeName {
		return
	}
	if err := r.Client.Delete(ctx, l, &client.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}}); err != nil && !apierrors.IsNotFound(err) {
		log.FromContext(ctx).Info("drop the origin Lease failed", "lease", l.Name, "error", err.Error())
	}
}
