package migration_test

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkMove moves a 4 GiB VM disk to the other node, which holds its
// golden base, with 5%, 25% and 100% of it rewritten: the bytes on the
// wire and the time of each copy. At 100% every block differs from the
// base, so that copy is a full copy of the device over the same path (the
// agents' endpoint, TLS, zstd of random data): the baseline of the others.
func BenchmarkMove(b *testing.B) {
	const size = 4096 // MiB
	type result struct {
		pct                int
		written, copied    int64
		sent               int64
		seconds, perSecond float64
	}
	var results []result
	for range b.N {
		results = results[:0]
		for _, pct := range []int{5, 25, 100} {
			src, dst := fmt.Sprintf("bench-src-%d", pct), fmt.Sprintf("bench-copy-%d", pct)
			disk(b, src, sharedClass, "4Gi", nodeA, nil)
			lv := bound(b, src, 3*time.Minute)
			n := int64(size * pct / 100)
			write(b, nodeA, lv.Status.VolumeID, 0, n)
			disk(b, dst, sharedClass, "4Gi", nodeB, fromClaim(src))
			cp := bound(b, dst, 30*time.Minute)
			st := cp.Status.Transfer
			if st == nil || st.StartTime == nil || st.CompletionTime == nil {
				b.Fatalf("%s: transfer %+v", dst, st)
			}
			secs := st.CompletionTime.Sub(st.StartTime.Time).Seconds()
			results = append(results, result{pct: pct, written: n * mib, copied: st.BytesDone, sent: st.BytesSent, seconds: secs,
				perSecond: float64(st.BytesPerSecond)})
			remove(b, dst, src)
		}
	}
	full := results[len(results)-1]
	for _, r := range results {
		b.Logf("%3d%% rewritten: %d MiB written, %d MiB copied, %d MiB sent (%.3fx the written data), %.1f s (%.1f MiB/s; %.1fx less time than the full copy)",
			r.pct, r.written/mib, r.copied/mib, r.sent/mib, float64(r.sent)/float64(r.written), r.seconds, r.perSecond/float64(mib), full.seconds/r.seconds)
		b.ReportMetric(float64(r.sent)/float64(r.written), fmt.Sprintf("sent/written-%d%%", r.pct))
		b.ReportMetric(full.seconds/r.seconds, fmt.Sprintf("full-copy-time/time-%d%%", r.pct))
	}
}
