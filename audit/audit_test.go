package audit_test

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// record replays the recorded 74-turn trajectory through the real runtime
// into a SQLite journal, with a bash tool that answers each call with its
// recorded output, and returns the database path and the run id.
func record(t *testing.T) (string, string) {
	t.Helper()
	tr, err := replay.Load(filepath.Join("..", "testdata", "trajectories", "deepseek_chat_dev.traj.json"))
	if err != nil {
		t.Fatal(err)
	}
	reg := tool.NewRegistry()
	tool.Add(reg, &tool.Tool{Name: "bash", Description: "recorded bash", Effect: tool.External},
		func(ctx context.Context, req *tool.Request, in struct {
			Command string `json:"command"`
		}) (*tool.Result, error) {
			r, _ := tr.ToolResult(req.CallID)
			out := r.RawOutput
			if r.CallID == "" {
				out = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n" + tr.Submission()
			}
			code := r.ExitCode
			return &tool.Result{Content: "exit code: 0\n" + out, ExitCode: &code}, nil
		})
	ws, err := tool.NewWorkspace(t.TempDir(), "/testbed", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	db := filepath.Join(t.TempDir(), "audit.db")
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rt := agent.NewRuntime(s, nil)
	var infos []agent.ToolInfo
	for _, sp := range reg.Specs() {
		infos = append(infos, agent.ToolInfo{ToolSpec: sp, Effect: "external"})
	}
	id, err := rt.Create(t.Context(), &agent.RunCreated{Task: tr.Task(), System: tr.System(), Tools: infos, MountPath: "/testbed",
		CompletionMarker: "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", Workspace: ws.Root(), Policy: agent.NewPolicyRef(policy.Default())})
	if err != nil {
		t.Fatal(err)
	}
	out, err := rt.Execute(t.Context(), id, &agent.ExecParams{Wiring: agent.Wiring{Model: replay.New(tr, nil), Tools: reg, Env: &tool.Env{Workspace: ws}}})
	if err != nil || out.Status != journal.StatusCompleted {
		t.Fatalf("record: %v %v", out, err)
	}
	d := identity.NewDirectory(s, nil)
	if _, err := d.Create(t.Context(), &identity.CreateParams{Name: "bot"}); err != nil {
		t.Fatal(err)
	}
	return db, id
}

func open(t *testing.T, db string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestVerifyAndExport(t *testing.T) {
	db, id := record(t)
	s := open(t, db)
	reports, err := audit.VerifyAll(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 2 {
		t.Fatalf("reports %+v", reports)
	}
	for _, r := range reports {
		if !r.OK || r.Head == "" {
			t.Errorf("report %+v", r)
		}
	}
	var buf bytes.Buffer
	if err := audit.Export(t.Context(), s, []string{id, identity.StreamID}, &buf, nil); err != nil {
		t.Fatal(err)
	}
	got, torn, err := journal.ReadJSONL(&buf)
	if err != nil || torn != nil {
		t.Fatalf("ReadJSONL: %v %v", torn, err)
	}
	want, _ := s.Read(t.Context(), id, 1)
	if diff := cmp.Diff(want, got[:len(want)]); diff != "" {
		t.Errorf("exported events differ (-stored +exported):\n%s", diff)
	}
	if err := journal.Verify(id, got[:len(want)]); err != nil {
		t.Error(err)
	}
	t.Logf("recorded run: %d events", len(want))
}

// Flipping any byte of any event is detected, at that event: every byte
// of every field the hash covers (and of the hashes themselves), for
// every event of the recorded run.
func TestEveryByteFlipIsDetected(t *testing.T) {
	db, id := record(t)
	s := open(t, db)
	events, err := journal.ReadVerified(t.Context(), s, id)
	if err != nil {
		t.Fatal(err)
	}
	flips := 0
	for i := range events {
		prev := journal.GenesisHash
		if i > 0 {
			prev = events[i-1].Hash
		}
		check := func(field string, e journal.Event) {
			flips++
			err := journal.VerifyFrom(id, prev, int64(i+1), []journal.Event{e})
			if err == nil {
				t.Fatalf("event %d: a flipped byte of %s was not detected", i+1, field)
			}
		}
		e := events[i]
		for j := range e.Payload {
			f := e
			f.Payload = bytes.Clone(e.Payload)
			f.Payload[j] ^= 0x01
			check("payload", f)
		}
		for j := range len(e.Type) {
			f := e
			b := []byte(e.Type)
			b[j] ^= 0x01
			f.Type = journal.Type(b)
			check("type", f)
		}
		for _, field := range []string{"hash", "prev_hash", "run_id"} {
			var s string
			switch field {
			case "hash":
				s = e.Hash
			case "prev_hash":
				s = e.PrevHash
			default:
				s = e.RunID
			}
			for j := range len(s) {
				b := []byte(s)
				b[j] ^= 0x01
				f := e
				switch field {
				case "hash":
					f.Hash = string(b)
				case "prev_hash":
					f.PrevHash = string(b)
				default:
					f.RunID = string(b)
				}
				check(field, f)
			}
		}
		f := e
		f.Time = e.Time.Add(1)
		check("time", f)
		f = e
		f.Seq++
		check("seq", f)
	}
	t.Logf("%d events, %d single-byte flips, all detected", len(events), flips)
}

// The same in the database itself: a byte flipped in a stored event (its
// payload, type, time, hash or prev_hash column) is reported by
// audit.Verify as that event, for every event of the recorded run.
func TestStoredByteFlipsAreReported(t *testing.T) {
	db, id := record(t)
	s := open(t, db)
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	events, _ := s.Read(t.Context(), id, 1)
	columns := []string{"payload", "type", "time", "hash", "prev_hash"}
	for i, e := range events {
		col := columns[i%len(columns)]
		var orig []byte
		if err := raw.QueryRow(`SELECT `+col+` FROM events WHERE run_id = ? AND seq = ?`, id, e.Seq).Scan(&orig); err != nil {
			t.Fatal(err)
		}
		flipped := bytes.Clone(orig)
		flipped[(i*7919)%len(flipped)] ^= 0x01
		set := func(v []byte) {
			var arg any = v
			if col != "payload" {
				arg = string(v)
			}
			if _, err := raw.Exec(`UPDATE events SET `+col+` = ? WHERE run_id = ? AND seq = ?`, arg, id, e.Seq); err != nil {
				t.Fatal(err)
			}
		}
		set(flipped)
		r, err := audit.Verify(t.Context(), s, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.OK || r.FirstBad != e.Seq {
			t.Errorf("event %d, %s flipped: report %+v", e.Seq, col, r)
		}
		set(orig)
	}
	if r, _ := audit.Verify(t.Context(), s, id); !r.OK {
		t.Fatalf("after restoring: %+v", r)
	}
	// A cut-off tail is caught by the run index.
	if _, err := raw.Exec(`DELETE FROM events WHERE run_id = ? AND seq = ?`, id, len(events)); err != nil {
		t.Fatal(err)
	}
	r, _ := audit.Verify(t.Context(), s, id)
	if r.OK || r.FirstBad != int64(len(events)) {
		t.Errorf("after deleting the last event: %+v", r)
	}
	t.Logf("%d stored events flipped one at a time, each reported at its own sequence number", len(events))
}
