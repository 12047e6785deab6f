package golden

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/node/diskimage"
)

// The Secrets and ConfigMaps golden images name, in the agent's namespace
// only (a Role; kustomize sets the namespace):
// +kubebuilder:rbac:groups="",namespace=thinlvm-system,resources=secrets;configmaps,verbs=get

// Credentials are the diskimage.Credentials of a node agent: the Secrets
// and ConfigMaps of its own namespace, read through reader at each
// population (an uncached reader, the manager's APIReader, so that the
// agent needs get on them and nothing more). Only Secrets labelled
// thinlvmv1.ImageCredentialsLabel=true are handed out: an image's server
// must never receive another Secret of the namespace, such as a
// ServiceAccount's token, because a GoldenImage named it.
type Credentials struct {
	Reader    client.Reader
	Namespace string
}

var _ diskimage.Credentials = Credentials{}

// Secret reads the image credentials Secret name.
func (c Credentials) Secret(ctx context.Context, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	if err := c.get(ctx, "Secret", name, s); err != nil {
		return nil, err
	}
	if s.Labels[thinlvmv1.ImageCredentialsLabel] != "true" {
		return nil, fmt.Errorf("%w: Secret %s/%s is not labelled %s=true: only Secrets so labelled are sent as an image's credentials",
			diskimage.ErrPermanent, c.Namespace, name, thinlvmv1.ImageCredentialsLabel)
	}
	return s, nil
}

// ConfigMap reads the CA ConfigMap name.
func (c Credentials) ConfigMap(ctx context.Context, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := c.get(ctx, "ConfigMap", name, cm); err != nil {
		return nil, err
	}
	return cm, nil
}

func (c Credentials) get(ctx context.Context, kind, name string, obj client.Object) error {
	if c.Namespace == "" {
		return fmt.Errorf("%w: %s %s: this node agent's namespace is unknown (--namespace or $POD_NAMESPACE)", diskimage.ErrPermanent, kind, name)
	}
	if err := c.Reader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: %s %s/%s not found", diskimage.ErrPermanent, kind, c.Namespace, name)
		}
		return fmt.Errorf("get %s %s/%s: %w", kind, c.Namespace, name, err)
	}
	return nil
}
