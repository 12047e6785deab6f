package lvmd

import (
	"fmt"
	"net/url"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// Client is what the node agent uses of lvmd.
type Client interface {
	pb.LVServiceClient
	pb.VGServiceClient
}

type client struct {
	pb.LVServiceClient
	pb.VGServiceClient
}

// Dial connects to lvmd at unix:///path or tcp://host:port. The connection
// is lazy: calls fail with Unavailable until lvmd listens.
func Dial(address string) (Client, *grpc.ClientConn, error) {
	u, err := url.Parse(address)
	if err != nil {
		return nil, nil, fmt.Errorf("lvmd address %q: %w", address, err)
	}
	var target string
	switch u.Scheme {
	case "unix":
		target = "unix://" + u.Path
	case "tcp":
		target = "passthrough:///" + u.Host
	default:
		return nil, nil, fmt.Errorf("lvmd address %q: scheme must be unix or tcp", address)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("dial lvmd %s: %w", address, err)
	}
	return &client{pb.NewLVServiceClient(conn), pb.NewVGServiceClient(conn)}, conn, nil
}
