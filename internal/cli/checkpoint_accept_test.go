package cli_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/internal/cli"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
)

// hashes returns path → SHA-256 of the files git does not ignore in the
// repository ws (what a checkpoint holds), from the workspace's own git.
func hashes(t testing.TB, ws string) map[string][32]byte {
	t.Helper()
	cmd := exec.Command("git", "-C", ws, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][32]byte{}
	for _, p := range strings.Split(string(out), "\x00") {
		if p == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(ws, p))
		if err != nil {
			continue // listed in the index, gone from disk
		}
		m[p] = sha256.Sum256(b)
	}
	return m
}

// syncWriter hands each JSON line of keel run --json to fn, on the
// executor's goroutine: the run waits while fn runs.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	fn  func(e journal.Event)
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadBytes('\n')
		if err != nil {
			w.buf.Write(line)
			return len(p), nil
		}
		var e journal.Event
		if json.Unmarshal(line, &e) == nil {
			w.fn(e)
		}
	}
}

// TestCheckpointAcceptance replays the recorded 74-turn marshmallow
// trajectory through keel run (real sandbox, tools, journal and
// checkpoints) in a copy of the git repository KEEL_CHECKPOINT_REPO,
// records the files at every checkpoint as the run journals it, then
// rewinds to every checkpoint and checks the files are byte-identical.
// It logs bytes per step and the time per snapshot (p50/p99). Skipped
// unless KEEL_CHECKPOINT_REPO is set: the repository is marshmallow at
// the task's base commit, with a large real tree beside it to pass 1,000
// files, for example
//
//	git clone -q MIRROR ws && git -C ws checkout -q b40a0f4e33823e6d0f341f7e8684e359a99060d1
//	cp -r $(go env GOMODCACHE)/golang.org/x/tools@v0.52.0 ws/third_party/x-tools && chmod -R u+w ws/third_party
//	git -C ws add -A && git -C ws commit -qm vendored
func TestCheckpointAcceptance(t *testing.T) {
	src := os.Getenv("KEEL_CHECKPOINT_REPO")
	if src == "" {
		t.Skip("KEEL_CHECKPOINT_REPO is not set")
	}
	home := setup(t)
	ws := filepath.Join(t.TempDir(), "testbed")
	if out, err := exec.Command("cp", "-a", src, ws).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	want := map[int64]map[string][32]byte{}
	var copyTime time.Duration
	w := &syncWriter{fn: func(e journal.Event) {
		if e.Type == journal.WorkspaceCheckpoint {
			t0 := time.Now()
			want[e.Seq] = hashes(t, ws)
			copyTime += time.Since(t0)
		}
	}}
	var errOut bytes.Buffer
	t0 := time.Now()
	code := cli.Main(t.Context(), []string{"run", "--model", "replay:" + trajectory, "--workspace", ws, "--mount-path", "/testbed",
		"--env", "PYTHONPATH=/testbed/src", "--json"}, w, &errOut)
	wall := time.Since(t0) - copyTime
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut.String())
	}
	id, st := lastRun(t, home)
	events := readEvents(t, home, id)
	var ms []int64
	for _, e := range events {
		if e.Type != journal.WorkspaceCheckpoint {
			continue
		}
		v, err := agent.Decode(&e)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, v.(*agent.WorkspaceCheckpoint).DurationMS)
	}
	store := filepath.Join(filepath.Dir(home), "checkpoints")
	loose, err := checkpoint.Size(store)
	if err != nil {
		t.Fatal(err)
	}
	n := len(hashes(t, ws))
	// The store's cost of the run beyond its first snapshot (the files
	// it started with): rewind the store to that by measuring a second
	// store holding only the first snapshot.
	base := baselineSize(t)
	slices.Sort(ms)
	pct := func(p float64) int64 { return ms[int(p*float64(len(ms)-1))] }
	t.Logf("workspace: %d files (git ls-files); run: %d steps, %d events, %d checkpoints, %s wall", n, st.Steps, len(events), len(ms), wall.Round(time.Millisecond))
	t.Logf("snapshot time: p50 %d ms, p99 %d ms, max %d ms (first, whole tree: %d ms)", pct(0.5), pct(0.99), ms[len(ms)-1], firstMS(t, events))
	t.Logf("store (loose objects): %d bytes total, first snapshot %d bytes, the rest %d bytes = %.0f bytes per step, %.0f per checkpoint", loose, base, loose-base, float64(loose-base)/float64(st.Steps), float64(loose-base)/float64(len(ms)-1))
	if err := checkpoint.Pack(t.Context(), store); err == nil {
		packed, _ := checkpoint.Size(store)
		t.Logf("store after git gc --auto: %d bytes", packed)
	}

	// Every step that runs tools takes a snapshot; most change nothing
	// (no event). Time both kinds on the same workspace, through the
	// hook an execution uses.
	hook, release := checkpoint.Hook(store, ws)
	defer release()
	var same, edit []time.Duration
	prev := &agent.Snapshot{}
	cp, err := hook(t.Context(), "bench", nil)
	if err != nil {
		t.Fatal(err)
	}
	prev.Tree, prev.Commit, prev.Store = cp.Tree, cp.Commit, cp.Store
	f := filepath.Join(ws, "src", "marshmallow", "fields.py")
	for i := range 50 {
		t0 := time.Now()
		if cp, err := hook(t.Context(), "bench", prev); err != nil || cp != nil {
			t.Fatalf("unchanged snapshot: %v %v", cp, err)
		}
		same = append(same, time.Since(t0))
		ff, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(ff, "# edit %d\n", i)
		ff.Close()
		t0 = time.Now()
		cp, err := hook(t.Context(), "bench", prev)
		if err != nil || cp == nil {
			t.Fatalf("changed snapshot: %v %v", cp, err)
		}
		edit = append(edit, time.Since(t0))
		prev.Tree, prev.Commit = cp.Tree, cp.Commit
	}
	slices.Sort(same)
	slices.Sort(edit)
	t.Logf("snapshot of %d files, 50 each: unchanged p50 %s p99 %s; one file changed (with its commit) p50 %s p99 %s",
		n, same[25].Round(100*time.Microsecond), same[49].Round(100*time.Microsecond), edit[25].Round(100*time.Microsecond), edit[49].Round(100*time.Microsecond))
	if out, err := exec.Command("git", "-C", ws, "checkout", "-q", "--", "src/marshmallow/fields.py").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}

	// Rewind to every checkpoint, newest first, and compare.
	seqs := make([]int64, 0, len(want))
	for s := range want {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	slices.Reverse(seqs)
	var rw []time.Duration
	for _, s := range seqs {
		t0 := time.Now()
		if code, _, errOut := keel(t, "runs", "rewind", id, "--to", strconv.FormatInt(s, 10)); code != 0 {
			t.Fatalf("rewind --to %d = %d: %s", s, code, errOut)
		}
		rw = append(rw, time.Since(t0))
		got := hashes(t, ws)
		if len(got) != len(want[s]) {
			t.Errorf("rewind to %d: %d files, want %d", s, len(got), len(want[s]))
		}
		for p, h := range want[s] {
			if got[p] != h {
				t.Errorf("rewind to %d: %s differs", s, p)
			}
		}
	}
	slices.Sort(rw)
	t.Logf("rewinds: %d, each byte-identical; time p50 %s, p99 %s", len(rw), rw[len(rw)/2].Round(time.Millisecond), rw[int(0.99*float64(len(rw)-1))].Round(time.Millisecond))
}

func firstMS(t *testing.T, events []journal.Event) int64 {
	for _, e := range events {
		if e.Type == journal.WorkspaceCheckpoint {
			v, _ := agent.Decode(&e)
			return v.(*agent.WorkspaceCheckpoint).DurationMS
		}
	}
	return 0
}

// baselineSize snapshots a clone of KEEL_CHECKPOINT_REPO (the files the
// run starts with) into a fresh store and returns the store's size.
func baselineSize(t *testing.T) int64 {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "base")
	if out, err := exec.Command("git", "clone", "-q", "--no-hardlinks", os.Getenv("KEEL_CHECKPOINT_REPO"), dir).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v %s", err, out)
	}
	cp, err := checkpoint.OpenCheckpoints(t.Context(), filepath.Join(t.TempDir(), "store"), dir)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := cp.Snapshot(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Logf("first snapshot of a fresh clone, alone: %s", time.Since(t0).Round(time.Millisecond))
	n, err := checkpoint.Size(cp.Store())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func readEvents(t *testing.T, db, id string) []journal.Event {
	t.Helper()
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	events, err := journal.ReadVerified(t.Context(), s, id)
	if err != nil {
		t.Fatal(err)
	}
	return events
}
