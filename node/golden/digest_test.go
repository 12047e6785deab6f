package golden

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// The content digest is the SHA-256 of the chunks' SHA-256 digests, the
// same whether a chunk of zeros is hashed or recognised, for every size
// (a last chunk shorter than the rest, a device of less than one chunk).
func TestHashDevice(t *testing.T) {
	// By the definition: every chunk hashed, zeros too.
	want := func(b []byte) string {
		outer := sha256.New()
		for off := 0; off < len(b); off += contentChunk {
			s := sha256.Sum256(b[off:min(off+contentChunk, len(b))])
			outer.Write(s[:])
		}
		return hex.EncodeToString(outer.Sum(nil))
	}
	for _, tc := range []struct {
		name string
		size int
		data map[int]byte // offset: a non-zero byte
	}{
		{"zeros", 3 * contentChunk, nil},
		{"data in the middle chunk", 3 * contentChunk, map[int]byte{contentChunk + 17: 0xa5}},
		{"data in the last byte", 2 * contentChunk, map[int]byte{2*contentChunk - 1: 1}},
		{"a short last chunk", 2*contentChunk + 8192, map[int]byte{2*contentChunk + 4096: 7}},
		{"less than a chunk", 1 << 20, map[int]byte{0: 9}},
		{"less than a chunk, zeros", 1 << 20, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, tc.size)
			for off, v := range tc.data {
				b[off] = v
			}
			path := filepath.Join(t.TempDir(), "dev")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := hashDevice(context.Background(), path, int64(tc.size))
			if err != nil {
				t.Fatal(err)
			}
			if got != want(b) {
				t.Errorf("digest %s, want %s", got, want(b))
			}
			if whole := sha256.Sum256(b); tc.size > contentChunk && got == hex.EncodeToString(whole[:]) {
				t.Error("the digest is the SHA-256 of all the bytes, not of the chunks' digests")
			}
		})
	}
	// Two contents that differ only in one byte of a zero chunk differ.
	path := filepath.Join(t.TempDir(), "dev")
	b := make([]byte, 2*contentChunk)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	zero, err := hashDevice(context.Background(), path, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	b[contentChunk+contentChunk/2] = 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	one, err := hashDevice(context.Background(), path, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if zero == one {
		t.Error("a byte set in a chunk of zeros leaves the digest as it was")
	}
	// A device shorter than the size asked for is an error.
	if _, err := hashDevice(context.Background(), path, int64(len(b))+contentChunk); err == nil {
		t.Error("a device shorter than its size hashed without an error")
	}
}
