package csi

import (
	"context"
	"fmt"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// changes wakes the CSI calls waiting for a LogicalVolume when the
// informer behind the client's cache sees it change: a wait reads the
// object again only then, and answers as soon as the node agent reported.
type changes struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

// watch returns a channel that receives after each change of the
// LogicalVolume name, and the function that ends the watch. A caller
// watches before it reads the object, so that no change is missed.
func (c *changes) watch(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiters == nil {
		c.waiters = map[string]map[chan struct{}]struct{}{}
	}
	if c.waiters[name] == nil {
		c.waiters[name] = map[chan struct{}]struct{}{}
	}
	c.waiters[name][ch] = struct{}{}
	return ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.waiters[name], ch)
		if len(c.waiters[name]) == 0 {
			delete(c.waiters, name)
		}
	}
}

// notify wakes the watchers of name; a watcher not yet back from its last
// wake-up keeps one pending.
func (c *changes) notify(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	lv, ok := obj.(*thinlvmv1.LogicalVolume)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch := range c.waiters[lv.Name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// SetupWithManager subscribes the server's waits to the manager's
// LogicalVolume informer, whose cache the server's Client reads: the
// informer updates its cache before it calls its handlers, so a woken wait
// reads the change. Call it before the manager starts.
func (s *ControllerServer) SetupWithManager(mgr ctrl.Manager) error {
	inf, err := mgr.GetCache().GetInformer(context.Background(), &thinlvmv1.LogicalVolume{})
	if err != nil {
		return fmt.Errorf("LogicalVolume informer: %w", err)
	}
	s.changes = &changes{}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    s.changes.notify,
		UpdateFunc: func(_, obj any) { s.changes.notify(obj) },
		DeleteFunc: s.changes.notify,
	})
	if err != nil {
		return fmt.Errorf("watch LogicalVolumes: %w", err)
	}
	return nil
}
