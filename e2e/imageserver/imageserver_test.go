package imageserver

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// get fetches url from this machine: the guest's address for the host is
// this machine's loopback here.
func get(t *testing.T, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, strings.Replace(url, lvmvm.HostAddress, "127.0.0.1", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestServeCountHoldLimit(t *testing.T) {
	s := Start(t)
	blob := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB: responses go in 1 MiB chunks
	url := s.Add("/img.raw", blob)
	if !strings.HasPrefix(url, "http://"+lvmvm.HostAddress+":") {
		t.Fatalf("URL %s: want the guests' address for this machine", url)
	}
	if resp, body := get(t, url); resp.StatusCode != http.StatusOK || !bytes.Equal(body, blob) || resp.Header.Get("ETag") == "" {
		t.Fatalf("GET: %s, %d bytes, ETag %q", resp.Status, len(body), resp.Header.Get("ETag"))
	}
	if resp, body := get(t, url, "Range", "bytes=16-31"); resp.StatusCode != http.StatusPartialContent || string(body) != "0123456789abcdef" {
		t.Errorf("ranged GET: %s %q", resp.Status, body)
	}
	if resp, _ := get(t, strings.Replace(url, "img.raw", "missing", 1)); resp.StatusCode != http.StatusNotFound {
		t.Errorf("missing path: %s", resp.Status)
	}
	if n, served := s.Downloads("/img.raw"); n != 2 || served != int64(len(blob))+16 || s.Requests("/img.raw") != 2 {
		t.Errorf("downloads %d, served %d, requests %d; want 2, %d, 2", n, served, s.Requests("/img.raw"), len(blob)+16)
	}

	release := s.Hold("/img.raw", 1<<20)
	done := make(chan []byte)
	go func() {
		_, body := get(t, url)
		done <- body
	}()
	select {
	case <-done:
		t.Fatal("a held path answered whole before its release")
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if body := <-done; !bytes.Equal(body, blob) {
		t.Errorf("released: %d bytes, want the blob", len(body))
	}

	s.Limit("/img.raw", 40<<20)
	if _, body := get(t, url); !bytes.Equal(body, blob) {
		t.Errorf("limited: %d bytes, want the blob", len(body))
	}
}
