// Command guesthelper runs inside the real-LVM test VM for the TopoLVM
// benchmark. It has two jobs:
//
//	guesthelper proxy -listen :PORT -socket PATH
//	    serves TCP on PORT and copies each connection to and from the unix
//	    socket PATH: TopoLVM's lvmd listens on a unix socket only, and the
//	    host reaches the guest through qemu's TCP forwards.
//	guesthelper acct FILE
//	    creates FILE and turns the kernel's process accounting on into it
//	    (acct(2)): one record for every process that exits, with its parent's
//	    pid, so that the host counts the processes each lvmd starts without
//	    putting anything in their way.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sync"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: guesthelper proxy -listen :PORT -socket PATH | guesthelper acct FILE")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "proxy":
		fs := flag.NewFlagSet("proxy", flag.ExitOnError)
		listen := fs.String("listen", "", "TCP address to serve, e.g. :7105.")
		socket := fs.String("socket", "", "The unix socket to forward to.")
		_ = fs.Parse(os.Args[2:])
		if *listen == "" || *socket == "" {
			log.Fatal("proxy: -listen and -socket are required")
		}
		err = proxy(*listen, *socket)
	case "acct":
		if len(os.Args) != 3 {
			log.Fatal("acct: want one file")
		}
		err = acct(os.Args[2])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		log.Fatal(err)
	}
}

func proxy(listen, socket string) error {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	log.Printf("proxy %s -> unix:%s", listen, socket)
	for {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		go forward(c, socket)
	}
}

// forward copies c to and from a new connection to socket until either
// side closes.
func forward(c net.Conn, socket string) {
	defer c.Close()
	u, err := net.Dial("unix", socket)
	if err != nil {
		log.Printf("dial %s: %v", socket, err)
		return
	}
	defer u.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		// Half-close so that the other direction drains, then ends.
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
	go pipe(u, c)
	go pipe(c, u)
	wg.Wait()
}

func acct(file string) error {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := syscall.Acct(file); err != nil {
		if errors.Is(err, syscall.ENOSYS) {
			return fmt.Errorf("acct %s: the kernel has no BSD process accounting: %w", file, err)
		}
		return fmt.Errorf("acct %s: %w", file, err)
	}
	return nil
}
