// Package endpoint opens the gRPC listeners of thinlvm's binaries from one
// address syntax: unix:///path (a socket only its owner may use) or
// tcp://host:port (for tests). It serves nothing itself.
package endpoint

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
)

// Listen opens addr. A unix socket replaces a stale one and is created with
// mode 0600.
func Listen(addr string) (net.Listener, error) {
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", addr, err)
	}
	switch u.Scheme {
	case "unix":
		path := u.Path
		if path == "" {
			return nil, fmt.Errorf("listen address %q: no socket path", addr)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("create socket directory: %w", err)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
		old := syscall.Umask(0o177)
		lis, err := net.Listen("unix", path)
		syscall.Umask(old)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", path, err)
		}
		return lis, nil
	case "tcp":
		lis, err := net.Listen("tcp", u.Host)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", u.Host, err)
		}
		return lis, nil
	default:
		return nil, fmt.Errorf("listen address %q: scheme must be unix or tcp", addr)
	}
}
