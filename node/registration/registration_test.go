package registration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The kubelet's side of the protocol is the real kubelet's, in the real-node
// suite (e2e/cluster, its real node); here the calls it makes, one by one.
func TestRegistration(t *testing.T) {
	dir := t.TempDir()
	s := &Server{Driver: "thinlvm.io", Dir: dir, Endpoint: "/var/lib/kubelet/plugins/thinlvm.io/csi.sock",
		Recheck: 20 * time.Millisecond, Log: testr.New(t)}
	// A socket left by the last run is replaced.
	if err := os.WriteFile(s.Path(), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()

	call := func() registerapi.RegistrationClient {
		t.Helper()
		var conn *grpc.ClientConn
		deadline := time.Now().Add(10 * time.Second)
		for {
			if fi, err := os.Lstat(s.Path()); err == nil && fi.Mode()&os.ModeSocket != 0 {
				c, err := grpc.NewClient("unix://"+s.Path(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				conn = c
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no registration socket at %s", s.Path())
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Cleanup(func() { conn.Close() })
		return registerapi.NewRegistrationClient(conn)
	}
	c := call()
	if fi, err := os.Lstat(s.Path()); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("socket %v (%v): want only its owner to use it", fi.Mode(), err)
	}
	info, err := c.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != "thinlvm.io" || info.Endpoint != s.Endpoint || len(info.SupportedVersions) == 0 {
		t.Errorf("GetInfo = %+v", info)
	}
	if s.Registered() || s.Check(nil) != nil {
		t.Errorf("before the kubelet's answer: registered %v, check %v", s.Registered(), s.Check(nil))
	}

	// Refused: the health check fails, so that the agent is restarted.
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: "version 9 unsupported"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(nil); err == nil || s.Registered() {
		t.Errorf("after a refusal: registered %v, check %v", s.Registered(), err)
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(nil); err != nil || !s.Registered() {
		t.Errorf("after registration: registered %v, check %v", s.Registered(), err)
	}

	// A socket removed under the agent comes back.
	if err := os.Remove(s.Path()); err != nil {
		t.Fatal(err)
	}
	if _, err := call().GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo on the socket made again: %v", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "thinlvm.io-reg.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after stop: %v", err)
	}
}
