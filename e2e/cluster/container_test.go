package cluster_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The VM node's lvmd runs the lvm2 of its image in a container. lvm typed
// on the host at the same time takes the same locks (the host's
// /run/lock/lvm): both sides' commands all succeed, none waits forever,
// the VG's metadata stays consistent, and the device nodes lvm in the
// container makes are the host's.
func TestHostLVMBesideContainer(t *testing.T) {
	const claims, hostRounds = 4, 6
	var wg sync.WaitGroup
	hostErr := make(chan error, 1)
	wg.Go(func() {
		for i := range hostRounds {
			name := fmt.Sprintf("vg0/host-lv-%d", i)
			for _, argv := range [][]string{
				{"lvm", "lvcreate", "--yes", "--thin", "--virtualsize", "64m", "--name", "host-lv-" + strconv.Itoa(i), "vg0/pool0"},
				{"lvm", "lvchange", "--addtag", "host", name},
				{"lvm", "lvremove", "--yes", name},
			} {
				if out, err := vm.Run(ctx, argv...); err != nil {
					hostErr <- fmt.Errorf("%v on the host beside lvmd's container: %w\n%s", argv, err, out)
					return
				}
			}
		}
	})
	var objs []client.Object
	for i := range claims {
		name := fmt.Sprintf("beside-%d", i)
		c, p := pvc(name, blockClass, "256Mi", true), pod(name+"-pod", true, onNode(vmNode), name)
		create(t, c, p)
		objs = append(objs, p, c)
	}
	var ids []string
	for i := range claims {
		_, pv := bound(t, fmt.Sprintf("beside-%d", i))
		ids = append(ids, pv.Spec.CSI.VolumeHandle)
	}
	wg.Wait()
	select {
	case err := <-hostErr:
		t.Error(err)
	default:
	}
	for _, id := range ids {
		// lvm in the container made the node in the host's /dev.
		if _, err := vm.Run(ctx, "test", "-b", "/dev/vg0/"+id); err != nil {
			t.Errorf("no device node /dev/vg0/%s on the host: %v", id, err)
		}
	}
	if out, err := vm.Run(ctx, "lvm", "vgck", "vg0"); err != nil {
		t.Errorf("vgck after both sides wrote the VG: %v\n%s", err, out)
	}
	if out, err := vm.Run(ctx, "lvm", "lvs", "--noheadings", "-o", "lv_name", "vg0"); err != nil || strings.Contains(out, "host-lv-") {
		t.Errorf("the host's own LVs are not all gone (%v):\n%s", err, out)
	}
	deleteAll(t, objs...)
}

// The node agent's container does what the kubelet asks of it on a real
// LV with the node image's own tools: mkfs.xfs and mount at publish, the
// mount seen on the host through the Bidirectional kubelet directory,
// xfs_growfs when the claim grows. The test plays the kubelet over the
// agent's CSI socket.
func TestNodeImageMountsAndGrows(t *testing.T) {
	c := pvc("image-fs", storageClass, "512Mi", false)
	create(t, c, pod("image-fs-pod", false, onNode(vmNode), "image-fs"))
	_, pv := bound(t, "image-fs")
	id := pv.Spec.CSI.VolumeHandle
	conn, err := vm.DialCSI()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	node := csi.NewNodeClient(conn)
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "xfs"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	target := "/var/lib/kubelet/pods/image-fs-pod/volumes/kubernetes.io~csi/" + pv.Name + "/mount"
	if _, err := vm.Run(ctx, "mkdir", "-p", target); err != nil {
		t.Fatal(err)
	}
	if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: capability,
		VolumeContext: pv.Spec.CSI.VolumeAttributes}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	defer func() {
		if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			t.Errorf("unpublish: %v", err)
		}
		if out, _ := vm.Run(ctx, "cat", "/proc/mounts"); strings.Contains(out, " "+target+" ") {
			t.Errorf("%s still mounted on the host after unpublish", target)
		}
		deleteAll(t, pod("image-fs-pod", false, nil), c)
	}()
	mounts, err := vm.Run(ctx, "cat", "/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(mounts, " "+target+" xfs ") {
		t.Fatalf("the container's xfs mount of %s is not on the host:\n%s", target, mounts)
	}
	if _, err := vm.Run(ctx, "dd", "if=/dev/zero", "of="+target+"/data", "bs=1M", "count=8", "conv=fsync"); err != nil {
		t.Fatalf("write through the host's view of the mount: %v", err)
	}
	size := func() int64 {
		out, err := vm.Run(ctx, "stat", "-f", "-c", "%b %S", target)
		if err != nil {
			t.Fatal(err)
		}
		var blocks, bsize int64
		if _, err := fmt.Sscan(out, &blocks, &bsize); err != nil {
			t.Fatalf("stat -f %s: %q", target, out)
		}
		return blocks * bsize
	}
	before := size()
	// The claim grows: the controller grows the LV, the kubelet (here, the
	// test) asks the agent to grow the filesystem.
	if err := k.Client.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("1Gi")
	if err := k.Client.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the LV to grow to 1Gi", 3*time.Minute, func() (bool, error) {
		lv := logicalVolume(t, id)
		return lv.Status.CurrentSize != nil && lv.Status.CurrentSize.Cmp(resource.MustParse("1Gi")) == 0, nil
	})
	if _, err := node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target, VolumeCapability: capability,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}}); err != nil {
		t.Fatalf("expand: %v", err)
	}
	if after := size(); after < before+400<<20 {
		t.Errorf("xfs_growfs from the node image: filesystem %d bytes after, %d before", after, before)
	}
}

// A container that exits is started again, as the kubelet does: lvmd
// killed in its container comes back by itself and serves the next claim.
func TestContainerRestartsOnExit(t *testing.T) {
	lvmd := k.NodeProcess(vmNode, "lvmd")
	if err := vm.Signal(ctx, lvmd, syscall.SIGHUP, false); err != nil { // podrun: SIGKILL the container
		t.Fatal(err)
	}
	waitFor(t, "lvmd's container to be started again", time.Minute, func() (bool, error) {
		return strings.Contains(k.VMLog(vmNode, "lvmd"), "podrun: container exited"), nil
	})
	c := pvc("after-restart", blockClass, "64Mi", true)
	create(t, c, pod("after-restart-pod", true, onNode(vmNode), "after-restart"))
	bound(t, "after-restart")
	deleteAll(t, pod("after-restart-pod", true, nil), c)
}
