package transfer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/node/directio"
	pb "github.com/thinlvm/thinlvm/node/transfer/proto"
)

// Copier copies a volume's data from another node's endpoint. Its zero
// value is not usable: set Reader and Certificate.
type Copier struct {
	// Reader reads the source node's LVMNode (its endpoint and pin) past
	// any cache: a restarted agent publishes a new certificate.
	Reader client.Reader
	// Certificate is this agent's own (NewCertificate), whose fingerprint
	// its LVMNode publishes: the caller's identity at other nodes'
	// endpoints.
	Certificate tls.Certificate
	// Uncompressed asks the server for raw chunks; by default they come
	// zstd-compressed.
	Uncompressed bool
	// Retries is how many times a broken Read is resumed; default 5.
	Retries int
}

// windowSize is the HTTP/2 flow-control window of a copy's stream and
// connection: 16 chunks in flight.
const windowSize = 16 * ChunkSize

// Session is one copy from one source node, open until Close.
type Session struct {
	c      *Copier
	node   string
	target string
	base   *pb.BaseRef
	conn   *grpc.ClientConn
	client pb.TransferClient

	mu       sync.Mutex
	progress Progress
}

// Progress is a copy's progress.
type Progress struct {
	Done, Total, Sent int64
	Start             time.Time
}

// Open dials node's endpoint and opens the copy of target there.
func (c *Copier) Open(ctx context.Context, node, target string) (*Session, *pb.OpenResponse, error) {
	s := &Session{c: c, node: node, target: target}
	if err := s.dial(ctx); err != nil {
		return nil, nil, err
	}
	resp, err := s.client.Open(ctx, &pb.OpenRequest{Target: target})
	if err != nil {
		s.conn.Close()
		return nil, nil, fmt.Errorf("open the copy on node %s: %w", node, err)
	}
	return s, resp, nil
}

// OpenBase dials node's endpoint and opens the copy of its golden base of
// the GoldenImage image of uid. A node that sends as many bases as it may
// already refuses with ResourceExhausted.
func (c *Copier) OpenBase(ctx context.Context, node, image, uid string) (*Session, *pb.OpenResponse, error) {
	s := &Session{c: c, node: node, base: &pb.BaseRef{GoldenImage: image, Uid: uid}}
	if err := s.dial(ctx); err != nil {
		return nil, nil, err
	}
	resp, err := s.client.Open(ctx, &pb.OpenRequest{Base: s.base})
	if err != nil {
		s.conn.Close()
		return nil, nil, fmt.Errorf("open the copy of the base of %s on node %s: %w", image, node, err)
	}
	return s, resp, nil
}

// dial (re)connects to the node's endpoint as its LVMNode publishes it now.
func (s *Session) dial(ctx context.Context) error {
	ln := &thinlvmv1.LVMNode{}
	if err := s.c.Reader.Get(ctx, types.NamespacedName{Name: s.node}, ln); err != nil {
		return status.Errorf(codes.Unavailable, "get LVMNode %s: %v", s.node, err)
	}
	ep := ln.Status.Transfer
	if ep == nil || ep.Address == "" || ep.CertificateSHA256 == "" {
		return status.Errorf(codes.Unavailable, "node %s publishes no transfer endpoint in its LVMNode", s.node)
	}
	if s.conn != nil {
		s.conn.Close()
	}
	conn, err := grpc.NewClient("passthrough:///"+ep.Address,
		grpc.WithTransportCredentials(credentials.NewTLS(pinnedTLS(ep.CertificateSHA256, s.c.Certificate))),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(4*ChunkSize)),
		// A window of many chunks: the default 64 KiB stalls the stream
		// on every round trip of a slow or distant network.
		grpc.WithInitialWindowSize(windowSize), grpc.WithInitialConnWindowSize(windowSize))
	if err != nil {
		return fmt.Errorf("dial node %s at %s: %w", s.node, ep.Address, err)
	}
	s.conn, s.client = conn, pb.NewTransferClient(conn)
	return nil
}

// Progress returns the copy's progress so far.
func (s *Session) Progress() Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.progress
}

// retryable tells whether a failed Read may be resumed: the connection or
// the server went away, not a refusal.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Internal, codes.Unknown, codes.ResourceExhausted:
		return true
	}
	return false
}

// CopyTo reads the ranges to copy (against the base, or every mapped one)
// and writes them into the device at path, resuming from the last range
// written when the connection breaks, then syncs the device.
func (s *Session) CopyTo(ctx context.Context, path string, againstBase bool) error {
	dev, err := directio.Open(path, os.O_WRONLY)
	if err != nil {
		return err
	}
	defer dev.Close()
	retries := s.c.Retries
	if retries == 0 {
		retries = 5
	}
	s.mu.Lock()
	s.progress = Progress{Start: time.Now()}
	s.mu.Unlock()
	var from uint64
	for attempt := 0; ; attempt++ {
		next, err := s.read(ctx, dev, againstBase, from)
		if err == nil {
			break
		}
		if ctx.Err() != nil || !retryable(err) || attempt >= retries {
			return err
		}
		from = next
		wait := time.Duration(1<<attempt) * time.Second
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if err := s.dial(ctx); err != nil && !retryable(err) {
			return err
		}
	}
	if err := dev.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return dev.Close()
}

// read runs one Read from offset from; it returns where the next one
// resumes: the end of the last chunk written.
func (s *Session) read(ctx context.Context, dev *os.File, againstBase bool, from uint64) (uint64, error) {
	comp := pb.Compression_COMPRESSION_ZSTD
	if s.c.Uncompressed {
		comp = pb.Compression_COMPRESSION_NONE
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.client.Read(ctx, &pb.ReadRequest{Target: s.target, Base: s.base, AgainstBase: againstBase, FromOffset: from, Compression: comp})
	if err != nil {
		return from, err
	}
	var dec *zstd.Decoder
	if comp == pb.Compression_COMPRESSION_ZSTD {
		if dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(4*ChunkSize)); err != nil {
			return from, err
		}
		defer dec.Close()
	}
	buf, zeros := directio.Buffer(ChunkSize), directio.Buffer(ChunkSize)
	first := true
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if first {
				return from, status.Error(codes.Unavailable, "the transfer stream ended before its plan")
			}
			return from, nil
		}
		if err != nil {
			return from, err
		}
		if first {
			plan := msg.GetPlan()
			if plan == nil {
				return from, status.Error(codes.Internal, "the transfer stream did not start with a plan")
			}
			first = false
			s.mu.Lock()
			s.progress.Total, s.progress.Done = int64(plan.GetTotalBytes()), int64(plan.GetDoneBytes())
			s.mu.Unlock()
			continue
		}
		c := msg.GetChunk()
		if c == nil || c.GetLength() > ChunkSize || c.GetOffset() < from {
			return from, status.Errorf(codes.Internal, "bad chunk at %d (+%d) after %d", c.GetOffset(), c.GetLength(), from)
		}
		data := zeros[:c.GetLength()]
		if !c.GetZero() {
			// Into buf either way: aligned, for O_DIRECT.
			switch {
			case c.GetCompression() != pb.Compression_COMPRESSION_ZSTD:
				data = append(buf[:0], c.GetData()...)
			case dec == nil:
				return from, status.Error(codes.Internal, "a zstd chunk in an uncompressed stream")
			default:
				if data, err = dec.DecodeAll(c.GetData(), buf[:0]); err != nil {
					return from, status.Errorf(codes.Internal, "decompress the chunk at %d: %v", c.GetOffset(), err)
				}
			}
			if uint64(len(data)) != c.GetLength() || crc32.Checksum(data, castagnoli) != c.GetCrc32C() {
				return from, status.Errorf(codes.DataLoss, "the chunk at %d (+%d) fails its checksum", c.GetOffset(), c.GetLength())
			}
		}
		if _, err := dev.WriteAt(data, int64(c.GetOffset())); err != nil {
			return from, fmt.Errorf("write %s at %d: %w", dev.Name(), c.GetOffset(), err)
		}
		from = c.GetOffset() + c.GetLength()
		s.mu.Lock()
		s.progress.Done += int64(c.GetLength())
		s.progress.Sent += int64(len(c.GetData()))
		s.mu.Unlock()
	}
}

// Close removes the source's snapshot and closes the connection. The
// source node's sweep removes the snapshot anyway once the target is
// Ready or gone: a failed Close leaves nothing for good.
func (s *Session) Close(ctx context.Context) error {
	defer s.conn.Close()
	_, err := s.client.Close(ctx, &pb.CloseRequest{Target: s.target, Base: s.base})
	return err
}
