// Package registration registers thinlvm's CSI node service with the
// kubelet, as the kubelet's plugin watcher expects of a CSI driver: a
// socket in the kubelet's plugins_registry directory that answers the
// kubelet's pluginregistration v1 calls (k8s.io/kubelet) with the driver's
// name and the path of its CSI socket. This is the job of the
// csi-node-driver-registrar sidecar, done in the node agent: one image
// fewer to run and mirror, and the agent knows whether the kubelet took it.
package registration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Server is a controller-runtime manager.Runnable that serves the
// registration socket until its context ends.
type Server struct {
	registerapi.UnimplementedRegistrationServer
	// Driver is the CSI driver's name (thinlvm.io).
	Driver string
	// Dir is the kubelet's plugin registration directory as this process
	// sees it (in the pod: the hostPath of /var/lib/kubelet/plugins_registry).
	Dir string
	// Endpoint is the CSI socket's path as the kubelet sees it on the host.
	Endpoint string
	// Recheck is how often the socket file is checked and made again if it
	// was removed (default 10 s).
	Recheck time.Duration
	Log     logr.Logger

	mu         sync.Mutex
	registered bool
	refused    string // the kubelet's error, when it refused the plugin
}

// SupportedVersions are the CSI versions the driver speaks.
var SupportedVersions = []string{"1.0.0"}

// Path is the registration socket's path: <dir>/<driver>-reg.sock, the name
// the kubelet's plugin watcher and the upstream registrar use.
func (s *Server) Path() string { return filepath.Join(s.Dir, s.Driver+"-reg.sock") }

// GetInfo is the kubelet's first call: what the plugin is and where its CSI
// socket is.
func (s *Server) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: s.Driver, Endpoint: s.Endpoint,
		SupportedVersions: SupportedVersions}, nil
}

// NotifyRegistrationStatus is the kubelet's answer: registered, or why not.
func (s *Server) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s.mu.Lock()
	s.registered, s.refused = st.PluginRegistered, ""
	if !st.PluginRegistered {
		s.refused = st.Error
	}
	s.mu.Unlock()
	if st.PluginRegistered {
		s.Log.Info("registered with the kubelet", "driver", s.Driver, "endpoint", s.Endpoint)
	} else {
		s.Log.Error(errors.New(st.Error), "the kubelet refused the plugin", "driver", s.Driver, "endpoint", s.Endpoint)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Check is a health check: it fails while the kubelet's last word was a
// refusal, so that the kubelet's liveness probe restarts the agent (the
// upstream registrar exits for the same reason). Not yet registered is
// healthy: the kubelet may not be running.
func (s *Server) Check(*http.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused != "" {
		return fmt.Errorf("the kubelet refused plugin %s: %s", s.Driver, s.refused)
	}
	return nil
}

// Registered tells whether the kubelet has taken the plugin.
func (s *Server) Registered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registered
}

// NeedLeaderElection is false: every node registers.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves the socket until ctx ends, and removes it then: a socket
// left behind would send the kubelet to a plugin that is gone. A socket
// removed under it (the directory cleaned) is made again, so that the
// kubelet's watcher sees it anew.
func (s *Server) Start(ctx context.Context) error {
	recheck := s.Recheck
	if recheck <= 0 {
		recheck = 10 * time.Second
	}
	for {
		lis, err := s.listen()
		if err != nil {
			return err
		}
		gs := grpc.NewServer()
		registerapi.RegisterRegistrationServer(gs, s)
		errc := make(chan error, 1)
		go func() { errc <- gs.Serve(lis) }()
		s.Log.Info("serving kubelet plugin registration", "socket", s.Path())
		again, err := s.watch(ctx, recheck, errc)
		gs.Stop()
		if !again {
			_ = os.Remove(s.Path())
			return err
		}
		s.Log.Info("registration socket removed: making it again", "socket", s.Path())
	}
}

// watch waits for the end of ctx (false), the server's failure (false, the
// error) or the socket file's removal (true).
func (s *Server) watch(ctx context.Context, recheck time.Duration, errc <-chan error) (again bool, err error) {
	t := time.NewTicker(recheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case err := <-errc:
			return false, fmt.Errorf("registration socket: %w", err)
		case <-t.C:
			if _, err := os.Lstat(s.Path()); errors.Is(err, os.ErrNotExist) {
				return true, nil
			}
		}
	}
}

// listen replaces a stale socket (the agent's last run) with a new one only
// root may use: the kubelet runs as root.
func (s *Server) listen() (net.Listener, error) {
	path := s.Path()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale registration socket: %w", err)
	}
	old := syscall.Umask(0o177)
	lis, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("registration socket: %w", err)
	}
	return lis, nil
}
