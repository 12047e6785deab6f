package cluster_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
	var pods []*corev1.Pod
	for i := range claims {
		name := fmt.Sprintf("beside-%d", i)
		c, p := pvc(name, blockClass, "256Mi", true), pod(name+"-pod", true, onNode(vmNode), name)
		create(t, c, p)
		objs, pods = append(objs, p, c), append(pods, p)
	}
	var ids []string
	for i := range claims {
		_, pv := bound(t, fmt.Sprintf("beside-%d", i))
		ids = append(ids, pv.Spec.CSI.VolumeHandle)
	}
	// The kubelet mapped each device into its pod (and is not still
	// setting the pods up when they are deleted).
	for _, p := range pods {
		waitRunning(t, p)
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
