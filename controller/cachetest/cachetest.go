// Package cachetest holds a controller's cache back for tests: the events
// a reconciler or server depends on arrive in whatever order the informers
// deliver them, and a test makes that order happen instead of waiting for
// it.
package cachetest

import (
	"context"
	"reflect"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Held is a cache that has not delivered an object's latest change yet:
// Get of that object (its kind and name) returns Before, as it was; every
// other read and every write go to Client.
type Held struct {
	client.Client
	Before client.Object
}

// Get implements client.Reader.
func (h Held) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if reflect.TypeOf(obj) == reflect.TypeOf(h.Before) && key == client.ObjectKeyFromObject(h.Before) {
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(h.Before.DeepCopyObject()).Elem())
		return nil
	}
	return h.Client.Get(ctx, key, obj, opts...)
}
