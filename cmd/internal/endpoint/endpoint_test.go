package endpoint

import (
	"os"
	"path/filepath"
	"testing"
)

func TestListenUnixSocketMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.sock")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil { // a stale socket file
		t.Fatal(err)
	}
	lis, err := Listen("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a 0600 socket", st.Mode())
	}
}

func TestListenTCPAndErrors(t *testing.T) {
	lis, err := Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	for _, bad := range []string{"http://x", "unix://", "::bad", "/no/scheme"} {
		if l, err := Listen(bad); err == nil {
			l.Close()
			t.Errorf("Listen(%q) succeeded", bad)
		}
	}
}
