package csi

import (
	"context"
	"fmt"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// changes wakes the CSI calls waiting for a LogicalVolume when the
// informer behind the client's cache sees it change: a wait reads the
// object again only then, and answers as soon as the node agent reported.
type changes struct {
	informers cache.Informers

	// subscribed is set once the handler is on the informer; guarded by
	// subMu, which is never held with mu.
	subMu      sync.Mutex
	subscribed bool

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

// subscribe puts the handler on the LogicalVolume informer, once. It is
// done at the first wait, not at set-up: an informer known at start would
// make the manager wait for its sync before it serves CSI, and the
// provisioner gives up on a socket that does not answer within a second.
func (c *changes) subscribe(ctx context.Context) error {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.subscribed {
		return nil
	}
	inf, err := c.informers.GetInformer(ctx, &thinlvmv1.LogicalVolume{})
	if err != nil {
		return fmt.Errorf("LogicalVolume informer: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    c.notify,
		UpdateFunc: func(_, obj any) { c.notify(obj) },
		DeleteFunc: c.notify,
	})
	if err != nil {
		return fmt.Errorf("watch LogicalVolumes: %w", err)
	}
	c.subscribed = true
	return nil
}

// watch returns a channel that receives after each change of the
// LogicalVolume name, and the function that ends the watch. A caller
// watches before it reads the object, so that no change is missed.
func (c *changes) watch(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := c.subscribe(ctx); err != nil {
		return nil, nil, err
	}
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
	}, nil
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

// SetupWithManager makes the server's waits follow the manager's
// LogicalVolume informer, whose cache the server's Client reads: the
// informer updates its cache before it calls its handlers, so a woken wait
// reads the change. Call it before the manager starts.
func (s *ControllerServer) SetupWithManager(mgr ctrl.Manager) error {
	s.changes = &changes{informers: mgr.GetCache()}
	return nil
}
