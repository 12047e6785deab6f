package topolvm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// acctRecord is what the benchmark reads of one BSD process accounting
// record (struct acct_v3 of linux/acct.h): the kernel writes one when a
// process exits, before its parent can reap it.
type acctRecord struct {
	PID, PPID uint32
	Comm      string
}

// acctV3Size is sizeof(struct acct_v3): flag, version, tty, exitcode, uid,
// gid, pid, ppid, btime, etime, eight comp_t and a 16-byte comm.
const acctV3Size = 64

// parseAcct parses a process accounting file written by a little-endian
// kernel with CONFIG_BSD_PROCESS_ACCT_V3.
func parseAcct(data []byte) ([]acctRecord, error) {
	if len(data)%acctV3Size != 0 {
		return nil, fmt.Errorf("process accounting file of %d bytes: not a whole number of %d-byte records", len(data), acctV3Size)
	}
	recs := make([]acctRecord, 0, len(data)/acctV3Size)
	for off := 0; off < len(data); off += acctV3Size {
		r := data[off : off+acctV3Size]
		if r[1] != 3 {
			return nil, fmt.Errorf("process accounting record at %d: version %d, want 3 (acct_v3)", off, r[1])
		}
		comm, _, _ := bytes.Cut(r[48:64], []byte{0})
		recs = append(recs, acctRecord{
			PID:  binary.LittleEndian.Uint32(r[16:20]),
			PPID: binary.LittleEndian.Uint32(r[20:24]),
			Comm: string(comm),
		})
	}
	return recs, nil
}

// children counts the records of processes whose parent was ppid and, when
// comm is not empty, whose command name is comm.
func children(recs []acctRecord, ppid int, comm string) float64 {
	var n float64
	for _, r := range recs {
		if int(r.PPID) == ppid && (comm == "" || r.Comm == comm) {
			n++
		}
	}
	return n
}

func acctV3(pid, ppid uint32, comm string) []byte {
	r := make([]byte, acctV3Size)
	r[1] = 3
	binary.LittleEndian.PutUint32(r[16:], pid)
	binary.LittleEndian.PutUint32(r[20:], ppid)
	copy(r[48:], comm)
	return r
}

func TestParseAcct(t *testing.T) {
	full := acctV3(9, 1, "0123456789abcdef") // comm fills all 16 bytes: no NUL
	bad := acctV3(9, 1, "lvm")
	bad[1] = 2
	tests := []struct {
		name    string
		data    []byte
		want    []acctRecord
		wantErr bool
	}{
		{name: "empty", data: nil, want: []acctRecord{}},
		{name: "two records", data: append(acctV3(120, 77, "lvm"), acctV3(121, 5, "cat")...),
			want: []acctRecord{{PID: 120, PPID: 77, Comm: "lvm"}, {PID: 121, PPID: 5, Comm: "cat"}}},
		{name: "comm of 16 bytes", data: full, want: []acctRecord{{PID: 9, PPID: 1, Comm: "0123456789abcdef"}}},
		{name: "torn record", data: acctV3(1, 1, "lvm")[:40], wantErr: true},
		{name: "version 2", data: bad, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAcct(tc.data)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseAcct: error %v, want error %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); !tc.wantErr && diff != "" {
				t.Errorf("parseAcct (-want +got):\n%s", diff)
			}
		})
	}
	recs := []acctRecord{{1, 7, "lvm"}, {2, 7, "dmsetup"}, {3, 8, "lvm"}, {4, 7, "lvm"}}
	if got := children(recs, 7, ""); got != 3 {
		t.Errorf("children(7, any) = %v, want 3", got)
	}
	if got := children(recs, 7, "lvm"); got != 2 {
		t.Errorf("children(7, lvm) = %v, want 2", got)
	}
}
