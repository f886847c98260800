package checkpoint_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
)

// benchTree copies a real tree into a temporary directory and returns
// it: KEEL_CHECKPOINT_REPO (a git work tree, for example marshmallow with
// golang.org/x/tools vendored, as TestCheckpointAcceptance describes),
// else the Go distribution's sources of the go command (about 1,500
// files).
func benchTree(b *testing.B) string {
	b.Helper()
	if !checkpoint.Available() {
		b.Skip("git is not installed")
	}
	src := os.Getenv("KEEL_CHECKPOINT_REPO")
	if src == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			b.Skipf("go env GOROOT: %v", err)
		}
		src = filepath.Join(strings.TrimSpace(string(out)), "src", "cmd", "go")
	}
	ws := filepath.Join(b.TempDir(), "ws")
	if out, err := exec.Command("cp", "-a", src, ws).CombinedOutput(); err != nil {
		b.Fatalf("cp: %v %s", err, out)
	}
	if out, err := exec.Command("chmod", "-R", "u+w", ws).CombinedOutput(); err != nil {
		b.Fatalf("chmod: %v %s", err, out)
	}
	return ws
}

// childCPU is the CPU time (user and system) of the waited-for child
// processes so far: git's, here.
func childCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loose counts the loose objects of store.
func loose(store string) int {
	n := 0
	filepath.WalkDir(filepath.Join(store, "objects"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && len(filepath.Base(filepath.Dir(p))) == 2 {
			n++
		}
		return nil
	})
	return n
}

// report adds p50 and p99 of ds (milliseconds) to b's metrics.
func report(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	at := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))]) / 1e6 }
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// BenchmarkCheckpointFirst: the first snapshot of a workspace into a new
// store, through the hook an execution calls (the whole tree).
func BenchmarkCheckpointFirst(b *testing.B) {
	ws := benchTree(b)
	var ds []time.Duration
	var size int64
	var objs int
	cpu0 := childCPU()
	for i := 0; b.Loop(); i++ {
		store := filepath.Join(b.TempDir(), fmt.Sprint("store", i))
		hook, release := checkpoint.Hook(store, ws)
		defer release()
		t0 := time.Now()
		if _, err := hook(b.Context(), "bench", nil); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		if size, _ = checkpoint.Size(store); size == 0 {
			b.Fatal("empty store")
		}
		objs = loose(store)
	}
	report(b, ds)
	b.ReportMetric(float64(childCPU()-cpu0)/1e6/float64(len(ds)), "git-cpu-ms/op")
	b.ReportMetric(float64(size), "store-bytes")
	b.ReportMetric(float64(objs), "loose-objects")
}

// BenchmarkCheckpointLater: later snapshots, each after one file of the
// tree changed (a line appended), then with nothing changed; store
// bytes per changed step.
func BenchmarkCheckpointLater(b *testing.B) {
	ws := benchTree(b)
	store := filepath.Join(b.TempDir(), "store")
	hook, release := checkpoint.Hook(store, ws)
	defer release()
	cp, err := hook(b.Context(), "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	prev := &agent.Snapshot{Tree: cp.Tree, Commit: cp.Commit, Store: cp.Store}
	var f string
	filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
		if f == "" && err == nil && d.Type().IsRegular() && filepath.Ext(p) == ".go" {
			f = p
		}
		return nil
	})
	base, _ := checkpoint.Size(store)
	var changed, same []time.Duration
	n := 0
	cpu0 := childCPU()
	for i := 0; b.Loop(); i++ {
		edit(b, f, i)
		t0 := time.Now()
		cp, err := hook(b.Context(), "bench", prev)
		if err != nil || cp == nil {
			b.Fatalf("changed snapshot: %v %v", cp, err)
		}
		changed = append(changed, time.Since(t0))
		prev.Tree, prev.Commit = cp.Tree, cp.Commit
		t0 = time.Now()
		if cp, err := hook(b.Context(), "bench", prev); err != nil || cp != nil {
			b.Fatalf("unchanged snapshot: %v %v", cp, err)
		}
		same = append(same, time.Since(t0))
		n++
	}
	report(b, changed)
	b.ReportMetric(float64(childCPU()-cpu0)/1e6/float64(2*n), "git-cpu-ms/snapshot")
	slices.Sort(same)
	b.ReportMetric(float64(same[len(same)/2])/1e6, "unchanged-p50-ms")
	b.ReportMetric(float64(same[int(0.99*float64(len(same)-1))])/1e6, "unchanged-p99-ms")
	size, _ := checkpoint.Size(store)
	b.ReportMetric(float64(size-base)/float64(n), "bytes/step")
}

// selfCPU is this process's own CPU time (user and system) so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCheckpointStep is the cost of the checkpoint an execution
// takes after a step, on the tree of benchTree (KEEL_CHECKPOINT_REPO: a
// 1,750-file repository in the measurements of docs/checkpoints.md)
// with 0, 1 and 100 files changed by the step (a line appended to
// each), through the hook an execution calls. Besides the latency it
// reports the CPU time per step of this process and of git's, which
// stay meaningful on a loaded machine.
func BenchmarkCheckpointStep(b *testing.B) {
	for _, n := range []int{0, 1, 100} {
		b.Run(fmt.Sprintf("changed=%d", n), func(b *testing.B) {
			ws := benchTree(b)
			var files []string
			filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() && filepath.Ext(p) == ".go" && len(files) < n {
					files = append(files, p)
				}
				return nil
			})
			if len(files) < n {
				b.Skipf("the tree has %d .go files, fewer than %d", len(files), n)
			}
			store := filepath.Join(b.TempDir(), "store")
			hook, release := checkpoint.Hook(store, ws)
			defer release()
			cp, err := hook(b.Context(), "bench", nil)
			if err != nil {
				b.Fatal(err)
			}
			prev := &agent.Snapshot{Tree: cp.Tree, Commit: cp.Commit, Store: cp.Store}
			// The execution's first snapshot is behind; so is the
			// first of each file's edits (new objects, a cold cache).
			var ds []time.Duration
			var cpu, gitCPU time.Duration
			for i := 0; b.Loop(); i++ {
				for _, f := range files {
					edit(b, f, i)
				}
				c0, g0, t0 := selfCPU(), childCPU(), time.Now()
				cp, err := hook(b.Context(), "bench", prev)
				ds = append(ds, time.Since(t0))
				cpu += selfCPU() - c0
				gitCPU += childCPU() - g0
				if err != nil {
					b.Fatal(err)
				}
				if (cp == nil) != (n == 0) {
					b.Fatalf("%d files changed, checkpoint %+v", n, cp)
				}
				if cp != nil {
					if len(cp.Files)+cp.MoreFiles != n {
						b.Fatalf("%d files changed, checkpoint lists %d", n, len(cp.Files)+cp.MoreFiles)
					}
					prev.Tree, prev.Commit = cp.Tree, cp.Commit
				}
			}
			report(b, ds)
			b.ReportMetric(float64(cpu)/1e6/float64(len(ds)), "keel-cpu-ms/op")
			b.ReportMetric(float64(gitCPU)/1e6/float64(len(ds)), "git-cpu-ms/op")
		})
	}
}

// edit appends a line to file f (edit i).
func edit(b *testing.B, f string, i int) {
	b.Helper()
	fh, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(fh, "// edit %d\n", i)
	fh.Close()
}
