package diskimage

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	ulikunitz "github.com/ulikunitz/xz"

	"github.com/thinlvm/thinlvm/node/diskimage/imagefile"
)

// xzImage is an xz stream (the xz file format, 1.2.0) of one block that
// holds data as one uncompressed LZMA2 chunk, with a CRC32 check. props is
// the block header's LZMA2 dictionary byte: 2 or 3 << (props/2 + 11)
// bytes, 4 GiB - 1 for 40. The decoder sizes its dictionary from it
// whatever the data.
func xzImage(props byte, data []byte) []byte {
	le := binary.LittleEndian
	flags := []byte{0x00, 0x01} // CRC32
	b := append([]byte{0xfd, '7', 'z', 'X', 'Z', 0x00}, flags...)
	b = le.AppendUint32(b, crc32.ChecksumIEEE(flags))

	// Block header: its size (12 bytes) / 4 - 1, no optional sizes, one
	// filter: LZMA2 (0x21) with its one byte of properties; padding, CRC32.
	header := []byte{12/4 - 1, 0x00, 0x21, 0x01, props, 0, 0, 0}
	header = le.AppendUint32(header, crc32.ChecksumIEEE(header))
	b = append(b, header...)
	// An uncompressed chunk that resets the dictionary, then the end.
	chunk := append([]byte{0x01, byte((len(data) - 1) >> 8), byte(len(data) - 1)}, data...)
	chunk = append(chunk, 0x00)
	b = append(b, chunk...)
	b = append(b, make([]byte, (4-len(chunk)%4)%4)...)
	b = le.AppendUint32(b, crc32.ChecksumIEEE(data))

	// Index: one record of the block's unpadded and uncompressed sizes.
	index := []byte{0x00, 0x01}
	index = binary.AppendUvarint(index, uint64(len(header)+len(chunk)+4))
	index = binary.AppendUvarint(index, uint64(len(data)))
	index = append(index, make([]byte, (4-len(index)%4)%4)...)
	index = le.AppendUint32(index, crc32.ChecksumIEEE(index))
	b = append(b, index...)

	footer := append(le.AppendUint32(nil, uint32(len(index)/4-1)), flags...)
	b = le.AppendUint32(b, crc32.ChecksumIEEE(footer))
	b = append(b, footer...)
	return append(b, 'Y', 'Z')
}

func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// xzRefusalAlloc bounds what refusing an xz image may allocate: the
// decoder's and writeRaw's buffers, far less than the dictionaries refused
// (imagefile caps them at 64 MiB), so that allocating one fails the test.
const xzRefusalAlloc = 16 << 20

func TestXzDictionaryCap(t *testing.T) {
	small := xzImage(12, []byte("first stream\n")) // a 256 KiB dictionary
	for _, tt := range []struct {
		name string
		img  io.Reader
	}{
		// 60 bytes that made ulikunitz/xz allocate 4 GiB.
		{name: "4 GiB dictionary", img: bytes.NewReader(xzImage(40, []byte("hello\n")))},
		{name: "96 MiB dictionary", img: bytes.NewReader(xzImage(29, []byte("hello\n")))},
		// Read one byte at a time, the block header comes after the
		// decoder is made: its first Read refuses it.
		{name: "4 GiB dictionary read byte by byte", img: iotest.OneByteReader(bytes.NewReader(xzImage(40, []byte("hello\n"))))},
		// Each stream's blocks choose their own dictionary.
		{name: "4 GiB dictionary in a second stream", img: io.MultiReader(bytes.NewReader(small), bytes.NewReader(xzImage(40, []byte("hello\n"))))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dev := device(t, 1<<20)
			before := totalAlloc()
			_, err := writeRaw(tt.img, dev, 1<<20)
			alloc := totalAlloc() - before
			t.Logf("writeRaw: %v; allocated %d KiB", err, alloc>>10)
			if msg := "xz dictionary is larger than 64 MiB"; err == nil || !strings.Contains(err.Error(), msg) || !permanent(err) {
				t.Errorf("writeRaw = %v, want a permanent error that says %q", err, msg)
			}
			if alloc > xzRefusalAlloc {
				t.Errorf("refusing the image allocated %d MiB, want at most %d MiB", alloc>>20, xzRefusalAlloc>>20)
			}
		})
	}
}

func TestXzDecompress(t *testing.T) {
	// A 3 MiB run, twice: the encoder makes the second copy matches 3 MiB
	// back, which decode right only with a dictionary that large (here
	// 8 MiB, xz -6's).
	run := make([]byte, 3<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range run {
		run[i] = byte(rng.Uint32() % 16)
	}
	raw := append(bytes.Repeat(run, 2), make([]byte, 1<<20)...)
	var buf bytes.Buffer
	w, err := ulikunitz.WriterConfig{DictCap: 8 << 20}.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name     string
		img, raw []byte
	}{
		{name: "8 MiB dictionary", img: buf.Bytes(), raw: raw},
		// The cap itself is allowed.
		{name: "64 MiB dictionary", img: xzImage(28, []byte("hello\n")), raw: []byte("hello\n")},
		{name: "two streams", img: append(xzImage(12, []byte("one\n")), xzImage(20, []byte("two\n"))...), raw: []byte("one\ntwo\n")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, kind, err := imagefile.Decompress(bytes.NewReader(tt.img))
			if err != nil || kind != "xz" {
				t.Fatalf("Decompress = %q, %v; want xz", kind, err)
			}
			got, err := io.ReadAll(r)
			if err != nil {
				t.Fatalf("read %d bytes of xz (%d decoded): %v", len(tt.img), len(got), err)
			}
			if !bytes.Equal(got, tt.raw) {
				t.Errorf("decoded %d bytes, not the image's %d", len(got), len(tt.raw))
			}
		})
	}
}
