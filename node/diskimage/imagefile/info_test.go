package imagefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInfoCheck reads qemu-img info reports captured from qemu-img 7.2.
func TestInfoCheck(t *testing.T) {
	tests := []struct {
		file    string
		virtual int64
		msg     string // of the refusal; "" when accepted
	}{
		{file: "info-qcow2.json", virtual: 4 << 20},
		{file: "info-qcow2-backing.json", virtual: 4 << 20, msg: `image refused: qcow2 has a backing file "/tmp/images/host.raw"`},
		{file: "info-qcow2-data-file.json", virtual: 4 << 20, msg: `image refused: qcow2 has an external data file "/tmp/images/data.raw"`},
		{file: "info-raw.json", virtual: 4 << 20, msg: `image refused: it is "raw", not qcow2`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			out, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			info, err := ParseInfo(out)
			if err != nil {
				t.Fatal(err)
			}
			if info.VirtualSize != tt.virtual {
				t.Errorf("virtual size %d, want %d", info.VirtualSize, tt.virtual)
			}
			err = info.Check("qcow2")
			switch {
			case tt.msg == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.msg != "" && (err == nil || !strings.Contains(err.Error(), tt.msg) || !errors.Is(err, ErrRefused)):
				t.Errorf("error %v, want a refusal with %q", err, tt.msg)
			}
		})
	}
}
