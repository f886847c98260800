package postgres_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
)

// payload1K is a compact JSON object of about 1 KB, the size of a typical
// model response event (the same as journal/sqlite's benchmark).
var payload1K = []byte(`{"text":"` + strings.Repeat("lorem ipsum ", 84) + `"}`)

type latencies []time.Duration

func (l latencies) report(b *testing.B, unit string) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	q := func(p float64) float64 { return float64(l[int(p*float64(len(l)-1))].Microseconds()) }
	b.ReportMetric(q(0.50), "p50-µs/"+unit)
	b.ReportMetric(q(0.99), "p99-µs/"+unit)
}

// BenchmarkAppend measures one Append of 1 or 4 events of about 1 KB to a
// local server (default synchronous_commit=on: the WAL is flushed before
// the commit returns), side by side with journal/sqlite's BenchmarkAppend.
func BenchmarkAppend(b *testing.B) {
	for _, batch := range []int{1, 4} {
		b.Run(fmt.Sprintf("events=%d", batch), func(b *testing.B) {
			s, _ := openTemp(b)
			ctx := b.Context()
			drafts := make([]journal.Draft, batch)
			for i := range drafts {
				drafts[i] = journal.Draft{Type: journal.ModelResponded, Time: time.Unix(1, 0), Payload: payload1K}
			}
			var (
				lat   latencies
				after int64
			)
			b.SetBytes(int64(batch * len(payload1K)))
			for b.Loop() {
				start := time.Now()
				if _, err := s.Append(ctx, "bench", after, drafts...); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				after += int64(batch)
			}
			lat.report(b, "append")
		})
	}
}

// BenchmarkRead300 reads a 300-event run whole, with and without verifying
// its chain.
func BenchmarkRead300(b *testing.B) {
	s, _ := openTemp(b)
	ctx := b.Context()
	for i := range 300 {
		if _, err := s.Append(ctx, "bench", int64(i), journal.Draft{Type: journal.ModelResponded, Time: time.Unix(1, 0), Payload: payload1K}); err != nil {
			b.Fatal(err)
		}
	}
	for _, verified := range []bool{false, true} {
		b.Run(fmt.Sprintf("verified=%t", verified), func(b *testing.B) {
			var lat latencies
			for b.Loop() {
				start := time.Now()
				var (
					evs []journal.Event
					err error
				)
				if verified {
					evs, err = journal.ReadVerified(ctx, s, "bench")
				} else {
					evs, err = s.Read(ctx, "bench", 1)
				}
				if err != nil || len(evs) != 300 {
					b.Fatalf("read %d events, %v", len(evs), err)
				}
				lat = append(lat, time.Since(start))
			}
			lat.report(b, "read")
		})
	}
}
