package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
)

// crashFixture is a recorded run of side effects and reads: appends to a
// log (not idempotent: an append that ran twice shows), file writes and
// reads, calls run together in one turn, and a final submission. A last
// turn answers without a call: the model's reply when it is told that
// its submission's outcome is unknown.
func crashFixture(t testing.TB) string {
	return writeTrajectory(t, "keep a log",
		[]fcall{sh("ls -la")},
		[]fcall{sh("echo one >> log.txt")},
		[]fcall{{"write_file", map[string]any{"path": "notes.txt", "content": "hello\n"}}, {"read_file", map[string]any{"path": "notes.txt"}}},
		[]fcall{sh("echo two >> log.txt && cat log.txt")},
		[]fcall{{"read_file", map[string]any{"path": "log.txt"}}, {"search_files", map[string]any{"pattern": "one"}}},
		[]fcall{sh("mkdir -p out && echo three >> log.txt")},
		[]fcall{sh("cat log.txt | sort | uniq -c")},
		[]fcall{sh("echo four >> log.txt"), {"read_file", map[string]any{"path": "."}}},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat log.txt")},
		nil,
	)
}

// appends maps the log lines to the calls that append them.
var appends = map[string]string{"one": "call_1_0", "two": "call_3_0", "three": "call_5_0", "four": "call_7_0"}

// The crash-safety harness: a keel process running a recorded run is
// killed (SIGKILL, through KEEL_DEBUG=crash_after_event=N) right after it
// appends event N, for every event N of the run; `keel runs resume` then
// finishes it. Each time: the run completes; every call of the recording
// has exactly one result; no call that is not read-only ran twice, and
// one whose outcome is unknown is reported to the model as such (and
// indeed did not run); the journal verifies.
func TestCrashAtEveryEventBoundary(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and resumes a keel process at every event of a run")
	}
	setup(t)
	crashHarness(t, crashFixture(t), nil, 12, true)
}

// The same harness on the recorded 74-turn SWE-bench trajectory (about
// 300 events; some 12 minutes here), when KEEL_CRASH_LONG is set.
func TestCrashAtEveryEventBoundaryLong(t *testing.T) {
	if os.Getenv("KEEL_CRASH_LONG") == "" {
		t.Skip("set KEEL_CRASH_LONG=1 to kill and resume the 74-turn replay at every event")
	}
	setup(t)
	crashHarness(t, trajectory, []string{"--mount-path", "/testbed", "--env", "PYTHONPATH=/testbed/src"}, 74, false)
}

func crashHarness(t *testing.T, traj string, extra []string, wantCalls int, fixtureLog bool) {
	args := func(db, ws string) []string {
		return append([]string{"run", "--db", db, "--model", "replay:" + traj, "--workspace", ws, "-q", "--no-wait"}, extra...)
	}
	// A clean run: the events to kill after.
	ws, db := t.TempDir(), filepath.Join(t.TempDir(), "clean.db")
	if code, _, errOut := keel(t, args(db, ws)...); code != 0 {
		t.Fatalf("clean run = %d\n%s", code, errOut)
	}
	cleanID := onlyRun(t, db)
	clean, cleanEvents := loadRun(t, db, cleanID)
	n := len(cleanEvents)
	if n < 30 {
		t.Fatalf("the recorded run has %d events, want at least 30", n)
	}
	if got := readLog(t, ws); fixtureLog && got != "one\ntwo\nthree\nfour\n" {
		t.Fatalf("clean log = %q", got)
	}
	// Each kill point has its own journal and workspace: they run a few
	// at a time (runEach), the summary once all have ended.
	var mu sync.Mutex
	var summary []string
	outcomes := map[string]int{}
	boundaries := map[int64]bool{}
	t.Cleanup(func() {
		var keys []string
		for k, v := range outcomes {
			keys = append(keys, fmt.Sprintf("%3d × %s", v, k))
		}
		sort.Strings(keys)
		sort.Slice(summary, func(i, j int) bool { return kpoint(summary[i]) < kpoint(summary[j]) })
		t.Logf("recorded run: %d events; %d kill points (%d distinct append boundaries); outcomes:\n%s",
			n, len(summary), len(boundaries), strings.Join(keys, "\n"))
		if os.Getenv("KEEL_CRASH_REPORT") != "" {
			t.Logf("per kill point: %s", strings.Join(summary, " "))
		}
	})
	runEach(t, n, func(i int) string { return fmt.Sprint("after_event_", i+1) }, func(t *testing.T, i int) {
		k := i + 1
		ws, db := t.TempDir(), filepath.Join(t.TempDir(), "crash.db")
		cmd := child(t, []string{fmt.Sprintf("KEEL_DEBUG=crash_after_event=%d", k)}, args(db, ws)...)
		if err := cmd.Wait(); !killedBySignal(err) {
			t.Fatalf("the keel process was not killed after event %d: %v", k, err)
		}
		id := onlyRun(t, db)
		before, _ := loadRun(t, db, id)
		if before.LastSeq < int64(k) {
			t.Fatalf("killed after event %d, but the journal ends at %d", k, before.LastSeq)
		}
		mu.Lock()
		boundaries[before.LastSeq] = true
		mu.Unlock()
		outcome := "completed before the kill"
		code, errOut := 0, ""
		if before.Status != journal.StatusCompleted {
			code, _, errOut = keel(t, "runs", "resume", "--db", db, id, "-q", "--no-wait")
			outcome = "resumed"
		}
		st, evs := loadRun(t, db, id)
		// The submission itself may be the call whose outcome is
		// unknown: the model is asked once more (and, in the fixture,
		// answers).
		marker := st.Status == journal.StatusCompleted && st.Ended.Reason == "marker" && st.Steps == clean.Steps
		answered := st.Status == journal.StatusCompleted && st.Ended.Reason == "answer" && st.Steps == clean.Steps+1
		exhausted := !fixtureLog && st.Status == journal.StatusFailed && st.Ended.Reason == "model_error" && st.Steps == clean.Steps
		if !marker && !answered && !exhausted || code != 0 && !exhausted {
			t.Fatalf("after resume (exit %d): %s %+v, %d steps (clean run: %d)\n%s", code, st.Status, st.Ended, st.Steps, clean.Steps, errOut)
		}
		if exhausted {
			outcome += " (the submission's outcome unknown; the recording has no next turn)"
		}
		r, err := audit.Verify(t.Context(), openDB(t, db), id)
		if err != nil || !r.OK {
			t.Fatalf("audit: %+v %v", r, err)
		}
		note := checkCrashInvariants(t, st, evs, ws, wantCalls, fixtureLog)
		if note != "" {
			outcome += ", " + note
		}
		mu.Lock()
		outcomes[outcome]++
		summary = append(summary, fmt.Sprintf("%d→%d:%s", k, before.LastSeq, outcome))
		mu.Unlock()
	})
}

// kpoint is the kill point of an entry of crashHarness's summary.
func kpoint(entry string) int {
	k, _, _ := strings.Cut(entry, "→")
	n, _ := strconv.Atoi(k)
	return n
}

func readLog(t *testing.T, ws string) string {
	b, err := os.ReadFile(filepath.Join(ws, "log.txt"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// checkCrashInvariants checks one resumed run and describes how its
// interrupted calls were repaired.
func checkCrashInvariants(t *testing.T, st *agent.State, evs []journal.Event, ws string, wantCalls int, fixtureLog bool) string {
	t.Helper()
	started := map[string]int{}
	for i := range evs {
		if evs[i].Type == journal.ToolStarted {
			var p agent.ToolStarted
			json.Unmarshal(evs[i].Payload, &p)
			started[p.CallID]++
		}
	}
	calls := 0
	var rerun, unknown []string
	results := map[string]*agent.ToolFinished{}
	for _, turn := range st.Turns {
		for _, c := range turn.Calls {
			calls++
			if c.Finished == nil {
				t.Errorf("call %s has no result", c.ID)
				continue
			}
			results[c.ID] = c.Finished
			readOnly := c.Name == "read_file" || c.Name == "search_files"
			switch {
			case readOnly && started[c.ID] == 2:
				rerun = append(rerun, c.ID)
			case readOnly && started[c.ID] == 1:
			case readOnly:
				t.Errorf("read-only call %s started %d times", c.ID, started[c.ID])
			case started[c.ID] != 1:
				t.Errorf("call %s (%s, not idempotent) started %d times", c.ID, c.Name, started[c.ID])
			case c.Finished.Synthetic:
				if !strings.Contains(c.Finished.Content, "outcome is unknown") {
					t.Errorf("call %s: synthetic result %q does not say the outcome is unknown", c.ID, c.Finished.Content)
				}
				unknown = append(unknown, c.ID)
			}
		}
	}
	if calls != wantCalls {
		t.Errorf("%d calls, want the recording's %d", calls, wantCalls)
	}
	if !fixtureLog {
		return describe(rerun, unknown)
	}
	// The log shows what really ran: each append at most once, exactly
	// once when its call has a real result, never when the model was told
	// the outcome is unknown (the kill came before the command ran).
	lines := map[string]int{}
	for _, l := range strings.Fields(readLog(t, ws)) {
		lines[l]++
	}
	for line, call := range appends {
		want := 1
		if r := results[call]; r != nil && r.Synthetic {
			want = 0
		}
		if lines[line] != want {
			t.Errorf("log line %q appears %d times, want %d (call %s)", line, lines[line], want, call)
		}
	}
	return describe(rerun, unknown)
}

func describe(rerun, unknown []string) string {
	var parts []string
	if len(rerun) > 0 {
		parts = append(parts, "read-only call re-run")
	}
	if len(unknown) > 0 {
		parts = append(parts, "call reported as unknown outcome")
	}
	return strings.Join(parts, ", ")
}

// A torn write in the journal: the keel process is killed mid-run, then
// the last frame of SQLite's write-ahead log is cut in half, as a crash
// in the middle of writing it leaves it. Keel reports the torn tail,
// every event before the torn append is kept byte for byte, the journal
// verifies, and the run resumes to completion.
func TestTornWALTail(t *testing.T) {
	setup(t)
	traj := crashFixture(t)
	ws, db := t.TempDir(), filepath.Join(t.TempDir(), "torn.db")
	cmd := child(t, []string{"KEEL_DEBUG=crash_after_event=25"}, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "-q", "--no-wait")
	if err := cmd.Wait(); !killedBySignal(err) {
		t.Fatalf("not killed: %v", err)
	}
	wal, err := os.ReadFile(db + "-wal")
	if err != nil || len(wal) < 32 {
		t.Fatalf("write-ahead log: %d bytes, %v", len(wal), err)
	}
	// Read the journal as it was, from a copy.
	snap := filepath.Join(t.TempDir(), "snap.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(db + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(snap+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	id := onlyRun(t, snap)
	_, before := loadRun(t, snap, id)
	// Cut the log in the middle of its last frame.
	pageSize := int(wal[8])<<24 | int(wal[9])<<16 | int(wal[10])<<8 | int(wal[11])
	cut := len(wal) - (24+pageSize)/2
	if err := os.Truncate(db+"-wal", int64(cut)); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := keel(t, "audit", "verify", "--all", "--db", db)
	if code != 0 || !strings.Contains(errOut, "ends with a torn write") || !strings.Contains(errOut, "cut short") {
		t.Fatalf("audit verify = %d\n%s%s", code, out, errOut)
	}
	_, after := loadRun(t, db, id)
	if len(after) >= len(before) || len(after) == 0 {
		t.Fatalf("%d events before the tear, %d after", len(before), len(after))
	}
	for i := range after {
		if after[i].Hash != before[i].Hash || string(after[i].Payload) != string(before[i].Payload) {
			t.Fatalf("event %d changed", i+1)
		}
	}
	t.Logf("killed after event 25 (journal at %d); the torn frame lost the last append, %d events kept byte for byte", len(before), len(after))
	if code, _, errOut := keel(t, "runs", "resume", "--db", db, id, "-q", "--no-wait"); code != 0 {
		t.Fatalf("resume = %d\n%s", code, errOut)
	}
	st, evs := loadRun(t, db, id)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("after resume: %s", st.Status)
	}
	checkCrashInvariants(t, st, evs, ws, 12, true)
}

// BenchmarkResumeAfterKill measures how long a killed run takes to get
// going again: from the start of a `keel runs resume` process to the
// first action it journals after run.resumed (here the gate's decision
// on the call of the model's response the killed process journaled
// last, event 20, before it ran it). Everything a resume must do before
// it acts is on that path: the process's start, the journal read,
// verified and folded, the sandbox started (before run.resumed, so that
// a sandbox that cannot start leaves the journal as it was) and the
// execution's first workspace snapshot. It reports p50 and p99 in
// milliseconds.
func BenchmarkResumeAfterKill(b *testing.B) {
	b.Setenv("KEEL_HOME", b.TempDir())
	traj := crashFixture(b)
	var lat []time.Duration
	for b.Loop() {
		b.StopTimer()
		ws, db := b.TempDir(), filepath.Join(b.TempDir(), "bench.db")
		child(b, []string{"KEEL_DEBUG=crash_after_event=20"}, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "-q", "--no-wait").Wait()
		s, err := sqlite.Open(db, nil)
		if err != nil {
			b.Fatal(err)
		}
		runs, _ := s.Runs(context.Background(), nil)
		id := runs[0].RunID
		evs, _ := s.Read(context.Background(), id, 1)
		next := evs[len(evs)-1].Seq + 2 // after run.resumed
		b.StartTimer()
		start := time.Now()
		cmd := child(b, nil, "runs", "resume", "--db", db, id, "-q", "--no-wait")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for e, err := range journal.Follow(ctx, s, id, next, time.Millisecond) {
			if err != nil {
				b.Fatal(err)
			}
			if e.Seq >= next {
				lat = append(lat, time.Since(start))
				break
			}
		}
		cancel()
		b.StopTimer()
		cmd.Wait()
		s.Close()
		b.StartTimer()
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
	}
}
