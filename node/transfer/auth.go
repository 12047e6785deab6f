package transfer

import (
	"context"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// nodeNameKey is the user extra in which the API server names the node of
// the pod a ServiceAccount token is bound to.
const nodeNameKey = "authentication.kubernetes.io/node-name"

// Authenticator tells which node's agent presented a token.
type Authenticator interface {
	// Authenticate returns the caller's node, or an error when the token is
	// not a node agent's pod-bound token for TransferAudience.
	Authenticate(ctx context.Context, token string) (node string, err error)
}

// TokenReviewer authenticates tokens with the API server's TokenReview:
// the token must be for thinlvmv1.TransferAudience, of the node agents'
// ServiceAccount, and bound to a pod scheduled on a node.
type TokenReviewer struct {
	Reviews authnclient.TokenReviewInterface
	// ServiceAccount is the node agents' ServiceAccount name (any
	// namespace), as the node identity admission policy keys it.
	ServiceAccount string
}

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// Authenticate implements Authenticator.
func (r *TokenReviewer) Authenticate(ctx context.Context, token string) (string, error) {
	tr, err := r.Reviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
		Token: token, Audiences: []string{thinlvmv1.TransferAudience}}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("review the caller's token: %w", err)
	}
	st := tr.Status
	if !st.Authenticated {
		return "", &authError{fmt.Sprintf("the token is not authenticated for audience %s: %s", thinlvmv1.TransferAudience, st.Error)}
	}
	user := st.User.Username
	if !strings.HasPrefix(user, "system:serviceaccount:") || !strings.HasSuffix(user, ":"+r.ServiceAccount) {
		return "", &authError{fmt.Sprintf("%s is not a thinlvm node agent (ServiceAccount %s)", user, r.ServiceAccount)}
	}
	nodes := st.User.Extra[nodeNameKey]
	if len(nodes) != 1 || nodes[0] == "" {
		return "", &authError{fmt.Sprintf("the token of %s names no node: it must be bound to the agent's scheduled pod", user)}
	}
	return nodes[0], nil
}

// authError is a token the server refuses (Unauthenticated), as opposed to
// a failed review (Unavailable).
type authError struct{ msg string }

func (e *authError) Error() string { return e.msg }
