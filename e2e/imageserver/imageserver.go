// Package imageserver serves golden images to the test VMs: an HTTP server
// on this machine's loopback, which the guests reach as lvmvm.HostAddress
// (qemu's user network), publishing blobs by path and counting, per path,
// the requests, the downloads (GET requests answered with a body) and the
// body bytes served. A path may be slowed to a rate or held after some
// bytes, to test interrupted and resumed downloads. The suites and the
// demo share it; nothing it serves leaves the machine.
package imageserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// Server is a running image server.
type Server struct {
	srv *httptest.Server

	mu        sync.Mutex
	blobs     map[string][]byte
	requests  map[string]int
	downloads map[string]int
	served    map[string]int64
	rate      map[string]int
	held      map[string]hold
}

// hold stops a path's responses after n bytes until release is closed.
type hold struct {
	n       int
	release chan struct{}
}

// New starts a server; Close stops it.
func New() *Server {
	s := &Server{blobs: map[string][]byte{}, requests: map[string]int{}, downloads: map[string]int{},
		served: map[string]int64{}, rate: map[string]int{}, held: map[string]hold{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Start starts a server that stops when tb's test ends.
func Start(tb testing.TB) *Server {
	s := New()
	tb.Cleanup(s.Close)
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Add publishes blob at path and returns its URL as the VMs see it.
func (s *Server) Add(path string, blob []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blobs[path] = blob
	_, port, _ := net.SplitHostPort(s.srv.Listener.Addr().String())
	return "http://" + lvmvm.HostAddress + ":" + port + path
}

// Limit serves path at about bytesPerSecond, without ranges.
func (s *Server) Limit(path string, bytesPerSecond int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rate[path] = bytesPerSecond
}

// Hold stops every response of path after n bytes until the returned
// release is called; the responses after that are whole.
func (s *Server) Hold(path string, n int) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := hold{n: n, release: make(chan struct{})}
	s.held[path] = h
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.held, path)
			s.mu.Unlock()
			close(h.release)
		})
	}
}

// Requests is how many requests path got, of any method.
func (s *Server) Requests(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[path]
}

// Downloads is how many GET requests of path were answered with a body,
// and how many body bytes path served in all.
func (s *Server) Downloads(path string) (downloads int, served int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downloads[path], s.served[path]
}

// SHA256 is blob's sha256 in hex, as a GoldenImage's source names it.
func SHA256(blob []byte) string {
	sum := sha256.Sum256(blob)
	return hex.EncodeToString(sum[:])
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	blob, ok := s.blobs[r.URL.Path]
	rate, held := s.rate[r.URL.Path], s.held[r.URL.Path]
	s.requests[r.URL.Path]++
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	cw := &countingWriter{ResponseWriter: w}
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.served[r.URL.Path] += cw.n
		if r.Method == http.MethodGet && cw.n > 0 {
			s.downloads[r.URL.Path]++
		}
	}()
	w.Header().Set("ETag", `"`+SHA256(blob)[:16]+`"`)
	if rate == 0 && held.n == 0 {
		http.ServeContent(cw, r, "image", time.Unix(1e9, 0), bytes.NewReader(blob))
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
	chunk := 1 << 20
	if rate > 0 {
		chunk = max(rate/10, 1)
	}
	for off := 0; off < len(blob); off += chunk {
		if held.n > 0 && off >= held.n {
			w.(http.Flusher).Flush()
			select {
			case <-held.release:
			case <-r.Context().Done():
				return
			}
			held.n = 0
		}
		if _, err := cw.Write(blob[off:min(off+chunk, len(blob))]); err != nil {
			return
		}
		if rate > 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// countingWriter counts the body bytes written.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}
