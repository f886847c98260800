//go:build linux

package linux_test

import (
	"context"
	"io"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
)

// percentile returns the p-th percentile (0..100) of ds in milliseconds.
func percentile(ds []time.Duration, p float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return float64(s[i]) / float64(time.Millisecond)
}

// BenchmarkExecTrue runs `true` through the sandbox and, alternating in
// the same loop, a bare fork+exec of `true` (os/exec with its output
// discarded), and reports the p50 and p99 of each and the ratio of the
// medians. The goal: p50 under 10 ms and within 3x of bare.
func BenchmarkExecTrue(b *testing.B) {
	for _, tt := range []struct {
		name string
		opts *linux.Options
		lim  *sandbox.Limits
	}{
		{"default", nil, nil},
		{"with-limits", nil, &sandbox.Limits{Memory: 512 << 20, Processes: 256, FileSize: 1 << 30, CPUTime: time.Minute, OpenFiles: 1024}},
		{"no-cgroups", &linux.Options{NoCgroups: true}, nil},
	} {
		b.Run(tt.name, func(b *testing.B) {
			sb, err := linux.New(&sandbox.Spec{Workspace: b.TempDir()}, tt.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Close()
			ctx := context.Background()
			cmd := &sandbox.Cmd{Args: []string{"true"}, Stdout: io.Discard, Limits: tt.lim}
			for range 20 { // warm up both paths
				sb.Exec(ctx, cmd)
				exec.Command("true").Run()
			}
			var inside, bare []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				res, err := sb.Exec(ctx, cmd)
				inside = append(inside, time.Since(t0))
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("Exec: %v %+v", err, res)
				}
				t0 = time.Now()
				c := exec.Command("true")
				c.Stdout = io.Discard
				if err := c.Run(); err != nil {
					b.Fatal(err)
				}
				bare = append(bare, time.Since(t0))
			}
			b.StopTimer()
			b.ReportMetric(percentile(inside, 50), "sandbox-p50-ms")
			b.ReportMetric(percentile(inside, 99), "sandbox-p99-ms")
			b.ReportMetric(percentile(bare, 50), "bare-p50-ms")
			b.ReportMetric(percentile(bare, 99), "bare-p99-ms")
			b.ReportMetric(percentile(inside, 50)/percentile(bare, 50), "p50-ratio")
		})
	}
}

// BenchmarkNew measures creating a sandbox for a new run, up to the end of
// its first command, and closing it.
func BenchmarkNew(b *testing.B) { benchNew(b, false) }

// BenchmarkNewPrestarted is BenchmarkNew in a warm process: the init was
// prestarted (linux.Prestart) a while before New, as a command that runs
// an agent does while it reads its journal and configuration.
func BenchmarkNewPrestarted(b *testing.B) { benchNew(b, true) }

func benchNew(b *testing.B, prestart bool) {
	ws := b.TempDir()
	var create, first, closing []time.Duration
	for i := 0; i < b.N; i++ {
		if prestart {
			b.StopTimer()
			linux.Prestart(nil)
			time.Sleep(100 * time.Millisecond) // the rest of the command's start
			b.StartTimer()
		}
		t0 := time.Now()
		sb, err := linux.New(&sandbox.Spec{Workspace: ws}, nil)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if res, err := sb.Exec(context.Background(), &sandbox.Cmd{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec: %v %+v", err, res)
		}
		t2 := time.Now()
		sb.Close()
		create = append(create, t1.Sub(t0))
		first = append(first, t2.Sub(t0))
		closing = append(closing, time.Since(t2))
	}
	b.ReportMetric(percentile(create, 50), "new-p50-ms")
	b.ReportMetric(percentile(create, 99), "new-p99-ms")
	b.ReportMetric(percentile(first, 50), "first-command-p50-ms")
	b.ReportMetric(percentile(closing, 50), "close-p50-ms")
}
