// Command fakelvm is an lvm binary for fake nodes of the local control plane:
// real lvmd runs it instead of lvm2 (--lvm-path), and it answers with the
// unit tests' simulated lvm (lvmd/lvm/fake), its state kept in the JSON file
// $FAKELVM_STATE between invocations. lvmd runs one command at a time, so the
// file needs no lock. With no state file it starts with one VG ("vg0",
// $FAKELVM_VG_SIZE bytes, default 100 GiB) holding a thin pool "pool0" of
// the same size.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
)

type state struct {
	VGs   []fake.VG
	Pools []fake.Pool
	LVs   []fake.LV
}

func main() {
	os.Exit(run())
}

func run() int {
	path := os.Getenv("FAKELVM_STATE")
	if path == "" {
		fmt.Fprintln(os.Stderr, "fakelvm: FAKELVM_STATE is not set")
		return 3
	}
	var st state
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		size := uint64(100 << 30)
		if s := os.Getenv("FAKELVM_VG_SIZE"); s != "" {
			if size, err = strconv.ParseUint(s, 10, 64); err != nil {
				fmt.Fprintf(os.Stderr, "fakelvm: FAKELVM_VG_SIZE: %v\n", err)
				return 3
			}
		}
		st.VGs = []fake.VG{{Name: "vg0", UUID: "fake-vg0", Size: size + 8<<20, Free: 8 << 20}}
		st.Pools = []fake.Pool{{VG: "vg0", Name: "pool0", UUID: "fake-pool0", Size: size, MetadataPercent: 1}}
	case err != nil:
		fmt.Fprintf(os.Stderr, "fakelvm: %v\n", err)
		return 5
	default:
		if err := json.Unmarshal(data, &st); err != nil {
			fmt.Fprintf(os.Stderr, "fakelvm: state %s: %v\n", path, err)
			return 5
		}
	}
	r := &fake.Runner{VGs: st.VGs, Pools: st.Pools, LVs: st.LVs}
	out, runErr := r.Run(context.Background(), os.Args[1:]...)
	os.Stdout.Write(out)
	st.VGs, st.Pools, st.LVs = r.VGs, r.Pools, r.LVs
	data, err = json.Marshal(st)
	if err == nil {
		err = os.WriteFile(path+".tmp", data, 0o644)
	}
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakelvm: save state: %v\n", err)
		return 5
	}
	var cerr *lvm.CommandError
	if errors.As(runErr, &cerr) {
		fmt.Fprintln(os.Stderr, cerr.Stderr)
		return cerr.ExitCode
	}
	if runErr != nil {
		fmt.Fprintln(os.Stderr, runErr)
		return 5
	}
	return 0
}
