// Command guesthelper runs inside the real-LVM test VM for the TopoLVM
// benchmark and the adoption test. It has three jobs:
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
//	guesthelper create -socket PATH -class CLASS -name NAME -size BYTES
//	    asks TopoLVM's lvmd on the unix socket PATH for an LV, as TopoLVM's
//	    node agent does (the adoption test makes TopoLVM's volumes so).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	tpb "github.com/topolvm/topolvm/pkg/lvmd/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: guesthelper proxy -listen :PORT -socket PATH | guesthelper acct FILE | guesthelper create -socket PATH -class CLASS -name NAME -size BYTES")
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
	case "create":
		fs := flag.NewFlagSet("create", flag.ExitOnError)
		socket := fs.String("socket", "", "TopoLVM's lvmd's unix socket.")
		class := fs.String("class", "", "The device class.")
		name := fs.String("name", "", "The LV's name.")
		size := fs.Int64("size", 0, "The LV's size in bytes.")
		_ = fs.Parse(os.Args[2:])
		if *socket == "" || *class == "" || *name == "" || *size <= 0 {
			log.Fatal("create: -socket, -class, -name and -size are required")
		}
		err = create(*socket, *class, *name, *size)
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

// create asks TopoLVM's lvmd for an LV, and prints it.
func create(socket, class, name string, size int64) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := tpb.NewLVServiceClient(conn).CreateLV(ctx, &tpb.CreateLVRequest{Name: name, DeviceClass: class, SizeBytes: size})
	if err != nil {
		return fmt.Errorf("CreateLV %s in %s: %w", name, class, err)
	}
	fmt.Printf("%s %d\n", resp.GetVolume().GetName(), resp.GetVolume().GetSizeBytes())
	return nil
}
