package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/internal/cli"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
)

// bigOutputTrajectory writes a replay trajectory whose one command prints
// 30,000 lines: more than a result holds, so its whole output is an
// artifact.
func bigOutputTrajectory(t *testing.T) string {
	t.Helper()
	args, _ := json.Marshal(map[string]string{"command": "seq 1 30000"})
	tr := map[string]any{
		"trajectory_format": "mini-swe-agent-1.1", "instance_id": "keel-big-output", "info": map[string]any{"submission": ""},
		"messages": []map[string]any{
			{"role": "system", "content": "You are a test fixture."},
			{"role": "user", "content": "Count."},
			{"role": "assistant", "content": "Counting.", "tool_calls": []map[string]any{{"id": "call_seq", "type": "function", "function": map[string]string{"name": "bash", "arguments": string(args)}}}},
			{"role": "tool", "tool_call_id": "call_seq", "content": "x"},
			{"role": "assistant", "content": "Counted."},
		},
	}
	b, _ := json.Marshal(tr)
	p := filepath.Join(t.TempDir(), "big.traj.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// keel runs show prints the last lines of each command's output and says
// how many it left out; --full prints all of it from the stored
// artifact, locally and through a team server.
func TestRunsShowOutput(t *testing.T) {
	db := setup(t)
	code, _, errOut := keel(t, "run", "--model", "replay:"+bigOutputTrajectory(t), "--workspace", t.TempDir(), "-q", "count")
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	id, st := lastRun(t, db)
	if f := st.LastTurn(); f == nil || len(f.Calls) != 1 || f.Calls[0].Finished == nil || f.Calls[0].Finished.Artifact == "" {
		t.Fatalf("the call's output should be an artifact: %+v", st.LastTurn())
	}
	has := func(out, line string) bool { return strings.Contains(out, "│ "+line+"\n") }
	code, out, _ := keel(t, "runs", "show", id)
	if code != 0 || !has(out, "30000") || !has(out, "29981") || has(out, "29980") || !strings.Contains(out, "earlier lines elided (--full prints the whole output from ") {
		t.Errorf("runs show = %d: want the last 20 lines and a note:\n%s", code, out)
	}
	code, full, _ := keel(t, "runs", "show", "--full", id)
	if code != 0 || !has(full, "1") || !has(full, "15000") || !has(full, "30000") || strings.Contains(full, "elided") {
		t.Errorf("runs show --full = %d: want every line from the artifact:\n%.2000s", code, full)
	}
	s := startServe(t)
	code, remote, errOut := keel(t, "--server", s.url, "runs", "show", "--full", id)
	if code != 0 || !has(remote, "15000") || strings.Count(remote, "│ ") != strings.Count(full, "│ ") {
		t.Errorf("--server runs show --full = %d %s: want the local output:\n%.2000s", code, errOut, remote)
	}
}

// waitBuffer is a writer that a test can wait on for some text.
type waitBuffer struct {
	mu   sync.Mutex
	b    strings.Builder
	want string
	seen chan struct{}
}

func (s *waitBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Write(p)
	if s.seen != nil && strings.Contains(s.b.String(), s.want) {
		close(s.seen)
		s.seen = nil
	}
	return len(p), nil
}

func (s *waitBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// keel runs show --follow prints the events of a live run as they are
// appended and ends with the run: the first half of a real demo run is
// copied into a new run, the follower prints it, then the rest is
// appended while it follows.
func TestRunsShowFollow(t *testing.T) {
	db := setup(t)
	code, _, errOut := keel(t, "run", "--model", "scripted:demo", "--workspace", demoProject(t), "-q", "fix it")
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	src, _ := lastRun(t, db)
	store, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	events, err := store.Read(t.Context(), src, 1)
	if err != nil {
		t.Fatal(err)
	}
	drafts := make([]journal.Draft, len(events))
	for i, e := range events {
		drafts[i] = journal.Draft{Type: e.Type, Time: e.Time, Payload: e.Payload}
	}
	const half = 8
	for _, tt := range []struct {
		id, seen string
		args     []string
		want     []string
	}{
		{"followed", "\n8 ", nil, []string{"\n12 ", "run.completed", "run followed · completed (answer)", "│ OK", "hash chain verified"}},
		{"followed-json", `"seq":8,`, []string{"--json"}, []string{`"seq":12,`, `"type":"run.completed"`}},
	} {
		id := tt.id
		if _, err := store.Append(t.Context(), id, 0, drafts[:half]...); err != nil {
			t.Fatal(err)
		}
		out := &waitBuffer{want: tt.seen, seen: make(chan struct{})}
		seen := out.seen
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		done := make(chan int, 1)
		var errBuf strings.Builder
		go func() {
			done <- cli.Main(ctx, append([]string{"runs", "show", "--follow", id}, tt.args...), out, &errBuf)
		}()
		select {
		case <-seen:
		case code := <-done:
			t.Fatalf("runs show --follow ended before the run did = %d\n%s\n%s", code, out, errBuf.String())
		}
		if _, err := store.Append(t.Context(), id, half, drafts[half:]...); err != nil {
			t.Fatal(err)
		}
		if code := <-done; code != 0 {
			t.Fatalf("runs show --follow = %d\n%s\n%s", code, out, errBuf.String())
		}
		cancel()
		got := out.String()
		for _, want := range tt.want {
			if !strings.Contains(got, want) {
				t.Errorf("runs show --follow %v lacks %q:\n%s", tt.args, want, got)
			}
		}
	}
	id := "followed"
	// --json --follow of a stopped run prints its events and ends.
	if code, lines, _ := keel(t, "runs", "show", "--json", "--follow", id); code != 0 || strings.Count(lines, "\n") != len(events) {
		t.Errorf("runs show --json --follow = %d, %d lines, want %d", code, strings.Count(lines, "\n"), len(events))
	}
}

// keel runs show --follow of a run waiting for approval ends as the help
// says ("until it ends or pauses") in both forms: it followed the run
// until someone decided (fresh-user trial 13, P13).
func TestRunsShowFollowWaitingRun(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	s := startServe(t)
	code, _, errOut := keel(t, "demo", "--no-wait")
	m := regexp.MustCompile(`keel approve (\S+) demo_4`).FindStringSubmatch(errOut)
	if code != 3 || m == nil {
		t.Fatalf("keel demo --no-wait = %d\n%s", code, errOut)
	}
	var outs []string
	for _, form := range [][]string{nil, {"--server", s.url}} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		var out, errBuf strings.Builder
		code := cli.Main(ctx, append(form, "runs", "show", m[1], "--follow"), &out, &errBuf)
		stopped := ctx.Err() != nil
		cancel()
		if stopped || code != 0 || !strings.Contains(out.String(), "approval.requested") {
			t.Errorf("keel %v runs show --follow of a waiting run = %d (still following after 2 minutes: %v)\n%s%s", form, code, stopped, out.String(), errBuf.String())
		}
		outs = append(outs, out.String())
	}
	if len(outs) == 2 && outs[0] != outs[1] {
		t.Errorf("the forms differ:\nlocal:\n%s\nserver:\n%s", outs[0], outs[1])
	}
}

// Every command that names a run takes a unique prefix of its id, the
// web UI's short form, or "last" (the newest run in this workspace);
// an ambiguous or unknown reference is a usage error saying which runs
// it could mean.
func TestRunReferences(t *testing.T) {
	db := setup(t)
	var ids, spaces []string
	for range 2 {
		ws := t.TempDir()
		if err := os.WriteFile(filepath.Join(ws, "main.go"), []byte("package main\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		keel(t, "run", "--model", "scripted:demo", "--workspace", ws, "--sandbox", "none", "-q", "fix it")
		id, _ := lastRun(t, db)
		ids, spaces = append(ids, id), append(spaces, ws)
	}
	for _, tt := range []struct {
		dir  string
		args []string
		code int
		want string
	}{
		{"", []string{"runs", "show", ids[0][:len(ids[0])-3]}, 0, ids[0]},
		{"", []string{"runs", "show", ids[1][:4] + "…" + ids[1][len(ids[1])-6:]}, 0, ids[1]},
		{"", []string{"runs", "show", ids[0][:4]}, 2, "matches 2 runs"},
		{"", []string{"runs", "show", "zzzzzzzz"}, 2, `no run "zzzzzzzz" (`},
		// A whole id of no run: "no run", not the storage's wording.
		{"", []string{"runs", "show", "01m9629ymntvypx9kvw4e4jyyk"}, 2, `keel: no run "01m9629ymntvypx9kvw4e4jyyk" (` + "`keel runs list`"},
		{"", []string{"runs", "diff", "01m9629ymntvypx9kvw4e4jyyk"}, 2, `keel: no run "01m9629ymntvypx9kvw4e4jyyk" (`},
		{"", []string{"runs", "tokens", "01m9629ymntvypx9kvw4e4jyyk"}, 2, `keel: no run "01m9629ymntvypx9kvw4e4jyyk" (`},
		{"", []string{"audit", "verify", "01m9629ymntvypx9kvw4e4jyyk"}, 2, `keel: no run "01m9629ymntvypx9kvw4e4jyyk" (`},
		{"", []string{"runs", "show", "01m"}, 2, `no run "01m" (RUN is a run id, a unique prefix of one (at least 4 characters`},
		{"", []string{"runs", "show", ids[0] + strings.Repeat("x", 5000)}, 2, `no run "` + ids[0] + `"… (5026 characters: a run id has 26)`},
		{"", []string{"runs", "list", "--limit", "-1"}, 2, "--limit -1: want 0 (all runs) or more"},
		{spaces[0], []string{"runs", "show", "last"}, 0, ids[0]},
		{filepath.Join(spaces[1]), []string{"runs", "cancel", "last"}, 0, ids[1]},
		{t.TempDir(), []string{"runs", "show", "last"}, 2, "no run in this workspace"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if tt.dir != "" {
				t.Chdir(tt.dir)
			}
			code, out, errOut := keel(t, tt.args...)
			if code != tt.code || !strings.Contains(out+errOut, tt.want) || len(out+errOut) > 2000 || strings.Contains(errOut, "journal/sqlite") {
				t.Errorf("keel %s = %d, want %d and %q\n%s%s", strings.Join(tt.args, " "), code, tt.code, tt.want, out, errOut)
			}
		})
	}
}
