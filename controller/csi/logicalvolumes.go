package csi

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/kubestatus"
)

func (s *ControllerServer) waitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	t := s.Timeout
	if t == 0 {
		t = 2 * time.Minute
	}
	return context.WithTimeout(ctx, t)
}

func (s *ControllerServer) getLV(ctx context.Context, name string) (*thinlvmv1.LogicalVolume, error) {
	lv := &thinlvmv1.LogicalVolume{}
	if err := s.Client.Get(ctx, types.NamespacedName{Name: name}, lv); err != nil {
		return nil, err
	}
	return lv, nil
}

// watch subscribes to the changes of the LogicalVolume name, before a
// wait's first read.
func (s *ControllerServer) watch(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if s.changes == nil {
		return nil, nil, status.Error(codes.Internal, "the controller does not watch LogicalVolumes: SetupWithManager was not called")
	}
	wake, stop, err := s.changes.watch(ctx, name)
	if err != nil {
		return nil, nil, kubestatus.Errorf(err, "watch LogicalVolume %s", name)
	}
	return wake, stop, nil
}

// waitReady waits until the node agent made the LogicalVolume (Ready for
// the current generation) or refused it (Failed, whose reason thinlvmv1.Failure maps
// to the call's code). done tells whether the object is where the caller
// wants it; pending, when set, sees each state short of both. It reads the
// object when the informer reports it changed.
func (s *ControllerServer) waitReady(ctx context.Context, name string, done func(*thinlvmv1.LogicalVolume) bool, pending func(*thinlvmv1.LogicalVolume)) (*thinlvmv1.LogicalVolume, error) {
	ctx, cancel := s.waitContext(ctx)
	defer cancel()
	wake, stop, err := s.watch(ctx, name)
	if err != nil {
		return nil, err
	}
	defer stop()
	seen := false
	for {
		lv, err := s.getLV(ctx, name)
		if err == nil {
			seen = true
		} else if seen && apierrors.IsNotFound(err) {
			// Deleted under the wait (a node cleanup, an earlier attempt's
			// refusal): nobody will make it Ready.
			return nil, status.Errorf(codes.Aborted, "LogicalVolume %s was deleted while waiting for its node; retry", name)
		}
		if err == nil && lv.Status.ObservedGeneration == lv.Generation {
			if done(lv) {
				return lv, nil
			}
			if c := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
				code, _ := thinlvmv1.Failure(c.Reason)
				return lv, status.Error(code, c.Message)
			}
			if pending != nil {
				pending(lv)
			}
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, kubestatus.Errorf(err, "get LogicalVolume %s", name)
		}
		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.DeadlineExceeded, "LogicalVolume %s: the node agent has not reported yet", name)
		case <-wake:
		}
	}
}

// stillDeleting refuses to wait on a LogicalVolume that an earlier,
// refused attempt deleted and that its node has not removed yet (its agent
// or lvmd is down): it will go, and waiting for it to become Ready would
// only run out the caller's deadline. Aborted: the provisioner retries,
// and the retry after it is gone makes a new one.
func stillDeleting(lv *thinlvmv1.LogicalVolume) error {
	if lv.DeletionTimestamp.IsZero() {
		return nil
	}
	return status.Errorf(codes.Aborted, "LogicalVolume %s is still being deleted by node %s after an earlier attempt; retry once it is gone", lv.Name, lv.Spec.NodeName)
}

func ready(lv *thinlvmv1.LogicalVolume) bool {
	return meta.IsStatusConditionTrue(lv.Status.Conditions, thinlvmv1.ConditionReady) && lv.Status.CurrentSize != nil
}

// waitGone waits until the LogicalVolume is deleted (its agent removed the
// LV and the finalizer).
func (s *ControllerServer) waitGone(ctx context.Context, name string) error {
	ctx, cancel := s.waitContext(ctx)
	defer cancel()
	wake, stop, err := s.watch(ctx, name)
	if err != nil {
		return err
	}
	defer stop()
	for {
		_, err := s.getLV(ctx, name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return status.Errorf(codes.DeadlineExceeded, "LogicalVolume %s: its node agent has not removed the LV yet", name)
		case <-wake:
		}
	}
}

// delete deletes the LogicalVolume id if it has role and waits until it is
// gone.
func (s *ControllerServer) delete(ctx context.Context, id string, role thinlvmv1.VolumeRole) error {
	lv, err := s.getLV(ctx, id)
	if apierrors.IsNotFound(err) || err == nil && isSnapshot(lv) != (role == thinlvmv1.RoleSnapshot) {
		return nil // absent, or an ID of the other role: no such volume
	}
	if err != nil {
		return kubestatus.Errorf(err, "get LogicalVolume %s", id)
	}
	if err := s.Client.Delete(ctx, lv); err != nil && !apierrors.IsNotFound(err) {
		return kubestatus.Errorf(err, "delete LogicalVolume %s", id)
	}
	return s.waitGone(ctx, id)
}
