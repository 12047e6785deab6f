// Command guestagent runs inside the real-LVM test VM. It lets host-side
// tests run commands (argv, never a shell), start and signal long-running
// processes such as lvmd, checksum a device, and power the VM off, over
// HTTP on the VM's
// restricted user network (reachable only through qemu's hostfwd on the
// host's 127.0.0.1).
package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// SumRequest asks for the checksum of a file or device.
type SumRequest struct {
	Path string `json:"path"`
}

// SumResponse is its XXH64 (hex) and how many bytes it read.
type SumResponse struct {
	XXH64 string `json:"xxh64"`
	Bytes int64  `json:"bytes"`
}

// ExecRequest runs argv and waits for it.
type ExecRequest struct {
	Argv  []string `json:"argv"`
	Stdin []byte   `json:"stdin,omitempty"`
}

// ExecResponse is the outcome of an ExecRequest.
type ExecResponse struct {
	Stdout   []byte  `json:"stdout"`
	Stderr   []byte  `json:"stderr"`
	ExitCode int     `json:"exitCode"`
	Seconds  float64 `json:"seconds"`
}

// SpawnRequest starts a named background process, logging to LogPath.
type SpawnRequest struct {
	Name    string   `json:"name"`
	Argv    []string `json:"argv"`
	LogPath string   `json:"logPath"`
}

// SignalRequest signals a named process and, with Wait, waits for its exit.
type SignalRequest struct {
	Name   string `json:"name"`
	Signal int    `json:"signal"`
	Wait   bool   `json:"wait"`
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

type agent struct {
	mu    sync.Mutex
	procs map[string]*proc
}

func main() {
	listen := flag.String("listen", ":7000", "HTTP listen address.")
	flag.Parse()
	a := &agent{procs: map[string]*proc{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("POST /exec", a.exec)
	mux.HandleFunc("POST /sum", sum)
	mux.HandleFunc("POST /spawn", a.spawn)
	mux.HandleFunc("POST /signal", a.signal)
	mux.HandleFunc("POST /poweroff", a.poweroff)
	log.Printf("guestagent listening on %s", *listen)
	log.Fatal(http.ListenAndServe(*listen, mux))
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func (a *agent) exec(w http.ResponseWriter, r *http.Request) {
	var req ExecRequest
	if !decode(w, r, &req) {
		return
	}
	if len(req.Argv) == 0 {
		http.Error(w, "empty argv", http.StatusBadRequest)
		return
	}
	cmd := exec.CommandContext(r.Context(), req.Argv[0], req.Argv[1:]...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &stdout, &stderr, bytes.NewReader(req.Stdin)
	start := time.Now()
	err := cmd.Run()
	resp := ExecResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Seconds: time.Since(start).Seconds()}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		resp.ExitCode = exitErr.ExitCode()
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_ = json.NewEncoder(w).Encode(resp)
}

// sum checksums a whole device: XXH64, about four times as fast as
// sha256sum under the VM's emulated CPU, where hashing a 4 GiB device
// with sha256sum takes two minutes. It compares copies; it is no defence.
func sum(w http.ResponseWriter, r *http.Request) {
	var req SumRequest
	if !decode(w, r, &req) {
		return
	}
	// O_DIRECT: no page cache to fill (a thin LV's unmapped ranges read as
	// zeros filled in place); a file system without it is read through
	// the cache.
	f, err := os.OpenFile(req.Path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if errors.Is(err, syscall.EINVAL) {
		f, err = os.Open(req.Path)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	defer f.Close()
	h := xxhash.New()
	buf := make([]byte, 4<<20+4096)
	if r := int(uintptr(unsafe.Pointer(&buf[0])) % 4096); r != 0 {
		buf = buf[4096-r:]
	}
	n, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf[:4<<20])
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_ = json.NewEncoder(w).Encode(SumResponse{XXH64: hex.EncodeToString(h.Sum(nil)), Bytes: n})
}

func (a *agent) spawn(w http.ResponseWriter, r *http.Request) {
	var req SpawnRequest
	if !decode(w, r, &req) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.procs[req.Name]; ok {
		select {
		case <-p.done:
		default:
			http.Error(w, "process "+req.Name+" is running", http.StatusConflict)
			return
		}
	}
	logf, err := os.OpenFile(req.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	a.procs[req.Name] = p
	fmt.Fprintln(w, cmd.Process.Pid)
}

func (a *agent) signal(w http.ResponseWriter, r *http.Request) {
	var req SignalRequest
	if !decode(w, r, &req) {
		return
	}
	a.mu.Lock()
	p, ok := a.procs[req.Name]
	a.mu.Unlock()
	if !ok {
		http.Error(w, "no process "+req.Name, http.StatusNotFound)
		return
	}
	select {
	case <-p.done:
	default:
		if err := p.cmd.Process.Signal(syscall.Signal(req.Signal)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	if req.Wait {
		select {
		case <-p.done:
		case <-time.After(60 * time.Second):
			http.Error(w, "process "+req.Name+" did not exit", http.StatusGatewayTimeout)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

func (a *agent) poweroff(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, "ok")
	go func() {
		time.Sleep(100 * time.Millisecond)
		os.Exit(0) // init syncs, unmounts and powers off when /ctl/cmd ends
	}()
}
