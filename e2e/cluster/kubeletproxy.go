package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// The API server reaches a kubelet (a pod's logs, exec, port-forward, the
// nodes/proxy subresource) through the harness: its egress selector sends
// the "cluster" traffic by HTTP CONNECT over a unix socket to a
// kubeletProxy, which sends a real node's kubelet address to the loopback
// port its VM forwards to the kubelet. The API server prefers the Node's
// InternalIP (--kubelet-preferred-address-types): with a Hostname address
// it looks the name up in DNS first (nodes/proxy checks that the name is
// not a loopback address), a query that would leave the machine. Every
// real node's guest has the same address (lvmvm.GuestAddress), so the
// proxy knows it only while one real node is routed. The proxy dials
// nothing else: a request for any other address is answered 403 there,
// so no packet leaves for it.
type kubeletProxy struct {
	ln  net.Listener
	log io.Writer

	mu     sync.Mutex
	routes map[string]func() string // "vm-node:10250", "10.0.2.15:10250" -> its forwarded address
	nodes  int                      // real nodes routed
}

// startKubeletProxy listens on a unix socket in dir and writes the API
// server's egress selector configuration beside it; it returns that file.
func startKubeletProxy(dir string, log io.Writer) (*kubeletProxy, string, error) {
	sock := filepath.Join(dir, "kubelet-proxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, "", fmt.Errorf("kubelet proxy: %w", err)
	}
	p := &kubeletProxy{ln: ln, log: log, routes: map[string]func() string{}}
	cfg := filepath.Join(dir, "egress-selector.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, sock), 0o644); err != nil {
		ln.Close()
		return nil, "", err
	}
	go p.serve()
	return p, cfg, nil
}

// route sends node's kubelet (by its name and, while it is the only real
// node, by the guests' address) to addr(), read at each connection: a
// rebooted VM may forward another port.
func (p *kubeletProxy) route(node string, addr func() string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	port := strconv.Itoa(KubeletPort)
	p.routes[net.JoinHostPort(node, port)] = addr
	p.nodes++
	ip := net.JoinHostPort(lvmvm.GuestAddress, port)
	if p.nodes == 1 {
		p.routes[ip] = addr
	} else {
		delete(p.routes, ip) // which node's? refused rather than guessed
	}
}

func (p *kubeletProxy) close() { p.ln.Close() }

func (p *kubeletProxy) serve() {
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(conn)
	}
}

func (p *kubeletProxy) handle(conn net.Conn) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		fmt.Fprint(conn, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	p.mu.Lock()
	addr, ok := p.routes[req.Host]
	p.mu.Unlock()
	if !ok {
		msg := "the test cluster reaches real nodes' kubelets only, not " + req.Host
		fmt.Fprintf(p.log, "kubelet proxy: refused %s\n", req.Host)
		fmt.Fprintf(conn, "HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
		return
	}
	up, err := net.DialTimeout("tcp", addr(), 10*time.Second)
	if err != nil {
		fmt.Fprint(conn, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := fmt.Fprint(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, br) // br: what the client sent after the request
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(conn, up)
	conn.Close() // ends the other copy
	<-done
}
