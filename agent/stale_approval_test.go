package agent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool/builtin/fs"
)

// askWrites asks before every file write.
const askWrites = `
@id("all") permit(principal, action, resource);
@id("writes") @ask forbid(principal, action in [Keel::Action::"write_file", Keel::Action::"edit_file"], resource);
`

// An approved write does not overwrite a file that changed after the
// approval was asked: the person approved a diff of what was there then.
// The model is told, and the file keeps the person's change.
func TestStaleApprovalDoesNotOverwrite(t *testing.T) {
	edit := func(id string, old ...string) model.ToolCall {
		o := "one"
		if len(old) > 0 {
			o = old[0]
		}
		b, _ := json.Marshal(map[string]string{"path": "a.txt", "old_string": o, "new_string": strings.ToUpper(o)})
		return tc(id, fs.EditName, string(b))
	}
	write := func(id string) model.ToolCall {
		b, _ := json.Marshal(map[string]string{"path": "new.txt", "content": "model\n"})
		return tc(id, fs.WriteName, string(b))
	}
	cases := []struct {
		name     string
		call     model.ToolCall
		also     []model.ToolCall // more calls of the turn, approved with it
		file     string
		before   *string // the file when the model asks (nil: absent)
		meantime *string // the file when the person approves (nil: absent)
		want     string  // the file after the approved call
		refused  string  // in the call's result when it was refused
	}{
		{name: "unchanged edit", call: edit("c1"), file: "a.txt", before: ptr("one\ntwo\n"), meantime: ptr("one\ntwo\n"), want: "ONE\ntwo\n"},
		{name: "edited meanwhile", call: edit("c1"), file: "a.txt", before: ptr("one\ntwo\n"), meantime: ptr("one\ntwo\nthree by hand\n"), want: "one\ntwo\nthree by hand\n", refused: "a.txt was changed after this call asked for approval"},
		{name: "removed meanwhile", call: edit("c1"), file: "a.txt", before: ptr("one\n"), meantime: nil, refused: "a.txt was removed after this call asked for approval"},
		{name: "two approved edits of one file", call: edit("c1"), also: []model.ToolCall{edit("c2", "two")}, file: "a.txt", before: ptr("one\ntwo\n"), meantime: ptr("one\ntwo\n"), want: "ONE\nTWO\n"},
		{name: "new file", call: write("c1"), file: "new.txt", want: "model\n"},
		{name: "created meanwhile", call: write("c1"), file: "new.txt", meantime: ptr("by hand\n"), want: "by hand\n", refused: "new.txt was created after this call asked for approval"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			fs.Register(e.reg, nil)
			path := filepath.Join(e.ws.Root(), tt.file)
			set := func(s *string) {
				t.Helper()
				if s == nil {
					if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
						t.Fatal(err)
					}
					return
				}
				if err := os.WriteFile(path, []byte(*s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			set(tt.before)
			m := &script{turns: []model.Message{calls(append([]model.ToolCall{tt.call}, tt.also...)...), answer("done")}}
			id := e.create(&agent.RunCreated{Policy: policyRef(t, askWrites)})
			out, err := e.rt.Execute(t.Context(), id, e.params(m))
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusPaused {
				t.Fatalf("status %s, want paused at the approval", out.Status)
			}
			set(tt.meantime)
			for _, c := range append([]model.ToolCall{tt.call}, tt.also...) {
				if err := e.rt.Resolve(t.Context(), id, c.ID, &agent.ApprovalResolved{Decision: policy.Allow, By: "ann"}); err != nil {
					t.Fatal(err)
				}
			}
			if out, err = e.rt.Execute(t.Context(), id, e.params(m)); err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusCompleted {
				t.Errorf("status %s after the approval, want completed", out.Status)
			}
			got, err := os.ReadFile(path)
			if tt.want == "" {
				if !os.IsNotExist(err) {
					t.Errorf("the file is %q (%v), want none", got, err)
				}
			} else if string(got) != tt.want {
				t.Errorf("the file is %q, want %q", got, tt.want)
			}
			res := payloads[agent.ToolFinished](t, e.events(id), journal.ToolFinished)
			if len(res) != 1+len(tt.also) {
				t.Fatalf("%d results", len(res))
			}
			switch {
			case tt.refused == "" && res[0].IsError:
				t.Errorf("the approved call failed: %s", res[0].Content)
			case tt.refused != "" && (!res[0].IsError || !strings.Contains(res[0].Content, tt.refused) || !strings.Contains(res[0].Content, "asked, again with the new diff")):
				t.Errorf("the model saw %q, want it refused with %q", res[0].Content, tt.refused)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// askShellWrites asks before every shell command that writes.
const askShellWrites = `
@id("all") permit(principal, action, resource);
@id("writes") @ask forbid(principal, action, resource) when { context.writes };
`

// A shell command that waits for approval does not overwrite a file it
// writes (its redirection, as the gate parsed it) that a person changed
// meanwhile; and when the person changed other files, the approved
// command runs after a checkpoint that holds their change, so a rewind
// can bring it back. The run waits in the process, as keel chat's does.
func TestStaleApprovalShellCommand(t *testing.T) {
	const cmd = `printf 'agent version\n' > notes.txt`
	cases := []struct {
		name     string
		file     string // the file a person changes while the call waits ("": none)
		refused  string // in the call's result when it was refused
		snapshot string // the checkpoint journaled between the decision and the start
	}{
		{name: "unchanged"},
		{name: "the written file edited", file: "notes.txt", refused: "not done: notes.txt was changed after this command asked for approval", snapshot: "notes.txt=by hand\n;other.txt=hello\n;"},
		{name: "another file edited", file: "other.txt", snapshot: "notes.txt=hello\n;other.txt=by hand\n;"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			withBash(e)
			for _, f := range []string{"notes.txt", "other.txt"} {
				if err := os.WriteFile(filepath.Join(e.ws.Root(), f), []byte("hello\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m := &script{turns: []model.Message{calls(bash("c1", cmd)), answer("done")}}
			id := e.create(&agent.RunCreated{Policy: policyRef(t, askShellWrites)})
			p := e.params(m)
			p.Checkpoint = (&snapshots{dir: e.ws.Root()}).hook
			p.Wait = true
			p.OnWait = func([]agent.PendingApproval) {
				if tt.file != "" {
					if err := os.WriteFile(filepath.Join(e.ws.Root(), tt.file), []byte("by hand\n"), 0o644); err != nil {
						t.Error(err)
					}
				}
				go func() {
					if err := e.rt.Resolve(t.Context(), id, "c1", &agent.ApprovalResolved{Decision: policy.Allow, By: "ann"}); err != nil {
						t.Error(err)
					}
				}()
			}
			out, err := e.rt.Execute(t.Context(), id, p)
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusCompleted {
				t.Fatalf("status %s, want completed", out.Status)
			}
			evs := e.events(id)
			req := payloads[agent.ApprovalRequested](t, evs, journal.ApprovalRequested)
			if len(req) != 1 || !strings.Contains(req[0].State, "notes.txt") {
				t.Fatalf("approval.requested state %+v, want the digest of notes.txt", req)
			}
			res := payloads[agent.ToolFinished](t, evs, journal.ToolFinished)
			if len(res) != 1 {
				t.Fatalf("%d results", len(res))
			}
			ran := len(e.log.get()) == 1
			switch {
			case tt.refused == "" && (res[0].IsError || !ran):
				t.Errorf("the approved command did not run: %s", res[0].Content)
			case tt.refused != "" && (ran || !res[0].IsError || !strings.Contains(res[0].Content, tt.refused)):
				t.Errorf("ran %v, the model saw %q, want it refused with %q", ran, res[0].Content, tt.refused)
			}
			// The snapshot taken after the approval, before the start.
			var snap string
			asked := false
			for _, ev := range evs {
				if ev.Type == journal.ToolStarted {
					break
				}
				asked = asked || ev.Type == journal.ApprovalRequested
				if ev.Type == journal.WorkspaceCheckpoint && asked {
					v, _ := agent.Decode(&ev)
					snap = v.(*agent.WorkspaceCheckpoint).Tree
				}
			}
			if snap != tt.snapshot {
				t.Errorf("checkpoint before the approved command %q, want %q", snap, tt.snapshot)
			}
		})
	}
}

// An edit that cannot apply to the file as it is (old_string not in it,
// no such file) is no question for a person: it fails at once with the
// tool's error, as it would have run, and the run goes on.
func TestEditThatCannotApplyIsNotAsked(t *testing.T) {
	for _, tt := range []struct {
		name, path, old, want string
	}{
		{"old_string not found", "a.txt", "hello", "cannot edit a.txt: old_string was not found"},
		{"no such file", "missing.txt", "one", "cannot edit missing.txt: no such file; to create a file use write_file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			fs.Register(e.reg, nil)
			if err := os.WriteFile(filepath.Join(e.ws.Root(), "a.txt"), []byte("one\ntwo\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(map[string]string{"path": tt.path, "old_string": tt.old, "new_string": "X"})
			m := &script{turns: []model.Message{calls(tc("c1", fs.EditName, string(b))), answer("I will read the file first")}}
			id := e.create(&agent.RunCreated{Policy: policyRef(t, askWrites)})
			out, err := e.rt.Execute(t.Context(), id, e.params(m))
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusCompleted || out.End.Reason != "answer" {
				t.Errorf("outcome %s %+v, want completed without a question", out.Status, out.End)
			}
			evs := e.events(id)
			if n := len(payloads[agent.ApprovalRequested](t, evs, journal.ApprovalRequested)); n != 0 {
				t.Errorf("%d approvals asked, want none", n)
			}
			res := payloads[agent.ToolFinished](t, evs, journal.ToolFinished)
			if len(res) != 1 || !res[0].IsError || !strings.HasPrefix(res[0].Content, tt.want) || strings.Contains(res[0].Content, "policy") {
				t.Errorf("results %+v, want one error starting %q", res, tt.want)
			}
			if got, _ := os.ReadFile(filepath.Join(e.ws.Root(), "a.txt")); string(got) != "one\ntwo\n" {
				t.Errorf("a.txt = %q", got)
			}
		})
	}
}
