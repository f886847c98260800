package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/codeact"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/none"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/fs"
	"github.com/keel-run/keel/tool/builtin/shell"
)

// userMessages returns the user.message events of a run as "source: first line".
func userMessages(t *testing.T, evs []journal.Event) []string {
	var out []string
	for i := range evs {
		v, err := agent.Decode(&evs[i])
		if err != nil {
			t.Fatal(err)
		}
		if u, ok := v.(*agent.UserMessage); ok {
			out = append(out, u.Source+": "+firstLineOf(u.Content))
		}
	}
	return out
}

// The same call with the same result, turn after turn, gets a nudge and
// then stops the run; a call whose result changes does not.
func TestRepeatedCallsNudgeThenStop(t *testing.T) {
	for _, tt := range []struct {
		name   string
		texts  []string
		status journal.Status
		reason string
		nudges int
	}{
		{"same call and result", []string{"x", "x", "x", "x", "x", "x", "x"}, journal.StatusFailed, "repeated_calls", 1},
		{"calls differ", []string{"a", "b", "c", "d", "e", "f", "g"}, journal.StatusCompleted, "answer", 0},
		{"two calls alternate", []string{"a", "b", "a", "b", "a", "b", "a", "b", "a", "b", "a", "b"}, journal.StatusFailed, "repeated_calls", 1},
		{"three calls in turn", []string{"a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "b", "c", "a"}, journal.StatusFailed, "repeated_calls", 1},
		{"a cycle that breaks", []string{"a", "b", "a", "b", "c", "a", "b", "a", "d", "e"}, journal.StatusCompleted, "answer", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			var turns []model.Message
			for i, x := range tt.texts {
				turns = append(turns, calls(tc("c"+string(rune('a'+i)), "echo", `{"text":"`+x+`"}`)))
			}
			m := &script{turns: append(turns, answer("done"))}
			id := e.create(&agent.RunCreated{})
			out, err := e.rt.Execute(context.Background(), id, e.params(m))
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != tt.status || out.End.Reason != tt.reason {
				t.Fatalf("outcome %v %+v", out.Status, out.End)
			}
			nudges := userMessages(t, e.events(id))
			if len(nudges) != tt.nudges {
				t.Fatalf("nudges %q, want %d", nudges, tt.nudges)
			}
			if tt.nudges > 0 {
				period := 1
				if tt.texts[1] != tt.texts[0] {
					period = 2
					if tt.texts[2] != tt.texts[0] {
						period = 3
					}
				}
				want := "keel.health: [Keel: you have made the same tool call 3 times"
				if period > 1 {
					want = fmt.Sprintf("keel.health: [Keel: you have gone through the same %d tool calls in turn 3 times", period)
				}
				if !strings.HasPrefix(nudges[0], want) {
					t.Errorf("nudge %q, want %q", nudges[0], want)
				}
				if out.State.Steps != agent.DefaultMaxRepeats*period {
					t.Errorf("stopped after %d steps, want %d", out.State.Steps, agent.DefaultMaxRepeats*period)
				}
			}
		})
	}
}

// In text-action mode a reply without an action is a format error sent
// back to the model; after three in a row the run stops.
// Spelling the same call differently (spacing, key order, escapes, the
// order of a turn's calls) does not get past loop detection.
func TestRepeatedCallsSpelledDifferently(t *testing.T) {
	spellings := [][]string{
		{`{"text":"x"}`, `{"text":"y"}`},
		{` { "text" : "x" } `, `{"text":"y"}`},
		{`{"text":"\u0078"}`, `{"text": "y"}`},
		{`{"text":"y"}`, `{"text":"x"}`},
		{"{\n  \"text\": \"x\"\n}", `{"text":"y"}`},
		{`{"text":"y"}`, `{  "text":"x"}`},
		{`{"text":"x"}`, `{"text":"\u0079"}`},
	}
	e := newEnv(t)
	var turns []model.Message
	for i, s := range spellings {
		turns = append(turns, calls(tc(fmt.Sprintf("c%da", i), "echo", s[0]), tc(fmt.Sprintf("c%db", i), "echo", s[1])))
	}
	m := &script{turns: append(turns, answer("done"))}
	id := e.create(&agent.RunCreated{})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusFailed || out.End.Reason != "repeated_calls" {
		t.Fatalf("outcome %v %+v, want failed: repeated_calls", out.Status, out.End)
	}
}

func TestFormatErrorsNudgeThenStop(t *testing.T) {
	for _, tt := range []struct {
		name    string
		replies []string
		status  journal.Status
		reason  string
		errors  int
	}{
		{"recovers", []string{"thinking…", "```bash\necho hi\n```", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\necho result\n```"}, journal.StatusCompleted, "marker", 1},
		{"keeps failing", []string{"a", "b", "c", "d"}, journal.StatusFailed, "format_errors", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.reg = tool.NewRegistry()
			shell.Register(e.reg, nil)
			sb, err := none.New(&sandbox.Spec{Workspace: e.ws.Root(), MountPath: "/workspace"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sb.Close() })
			var turns []model.Message
			for _, r := range tt.replies {
				turns = append(turns, model.Message{Content: r})
			}
			m := codeact.New(&textScript{turns: turns}, nil)
			id := e.create(&agent.RunCreated{FormatError: codeact.FormatError(nil, "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"), CompletionMarker: "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})
			p := e.params(m)
			p.Env.Sandbox = sb
			out, err := e.rt.Execute(context.Background(), id, p)
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != tt.status || out.End.Reason != tt.reason {
				t.Fatalf("outcome %v %+v", out.Status, out.End)
			}
			var want []string
			for range tt.errors {
				want = append(want, "keel.format: Format error: your reply has no action. Every reply must contain at least one fenced ```bash or ```python block; for example:")
			}
			if diff := cmp.Diff(want, userMessages(t, e.events(id))); diff != "" {
				t.Errorf("format errors (-want +got):\n%s", diff)
			}
			if tt.status == journal.StatusCompleted && out.End.Output != "result\n" {
				t.Errorf("output %q", out.End.Output)
			}
		})
	}
}

// textScript answers the k-th request with turns[k], k counting the
// assistant messages (a model without function calling).
type textScript struct{ turns []model.Message }

func (s *textScript) Generate(_ context.Context, req *model.Request) (*model.Response, error) {
	k := req.PriorTurns
	for _, m := range req.Messages {
		if m.Role == model.RoleAssistant {
			k++
		}
	}
	if k >= len(s.turns) {
		return nil, &model.Error{Kind: model.KindExhausted, Message: "exhausted"}
	}
	m := s.turns[k]
	m.Role = model.RoleAssistant
	return &model.Response{Message: m}, nil
}

// A model that re-spells one call (quotes, comments, "./", the mount
// path, options together or apart, a time limit, a path argument of a
// file tool) gets the nudge and then the stop that repeating it as
// written gets; calls that differ in what they do, or write different
// content the same way, are not repeats.
func TestRepeatedCallsRespelled(t *testing.T) {
	bashCall := func(cmd string) string { b, _ := json.Marshal(map[string]string{"command": cmd}); return string(b) }
	heredoc := func(i int) string { return bashCall(fmt.Sprintf("cat > out.txt <<'EOF'\nversion %d\nEOF", i)) }
	for _, tt := range []struct {
		name   string
		tool   string
		args   []string
		status journal.Status
		reason string
		nudges int
	}{
		{"cat quoted, commented, dotted", "bash", []string{bashCall("cat notes.txt"), bashCall("cat ./notes.txt"), bashCall("cat notes.txt  # again"), bashCall(`cat "notes.txt"`)}, journal.StatusFailed, "repeated_calls", 1},
		{"cat by a dotted path, escaped newline", "bash", []string{bashCall("cat ././notes.txt"), bashCall("cat 'notes.txt'"), bashCall("cat \\\n  notes.txt"), bashCall("cat notes.txt;")}, journal.StatusFailed, "repeated_calls", 1},
		{"options together or apart", "bash", []string{bashCall("ls -l -a"), bashCall("ls -al"), bashCall("ls -a -l"), bashCall("ls   -la")}, journal.StatusFailed, "repeated_calls", 1},
		{"a time limit", "bash", []string{bashCall("cat notes.txt"), `{"command":"cat notes.txt","timeout_ms":30000}`, `{"command":"cat notes.txt","timeout_ms":60000}`}, journal.StatusFailed, "repeated_calls", 1},
		{"read_file paths", "read_file", []string{`{"path":"notes.txt"}`, `{"path":"./notes.txt"}`, `{"path":"/workspace/notes.txt"}`, `{ "path" : "/workspace/./notes.txt" }`}, journal.StatusFailed, "repeated_calls", 1},
		{"different files", "bash", []string{bashCall("cat notes.txt"), bashCall("cat other.txt"), bashCall("wc -l notes.txt"), bashCall("head -1 other.txt"), bashCall("ls"), bashCall("cat -n notes.txt")}, journal.StatusCompleted, "answer", 0},
		{"here-documents with new content", "bash", []string{heredoc(1), heredoc(2), heredoc(3), heredoc(4), heredoc(5), heredoc(6), heredoc(7)}, journal.StatusCompleted, "answer", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.reg = tool.NewRegistry()
			shell.Register(e.reg, nil)
			fs.Register(e.reg, nil)
			for name, text := range map[string]string{"notes.txt": "hello\n", "other.txt": "other\n"} {
				if err := os.WriteFile(filepath.Join(e.ws.Root(), name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			sb, err := none.New(&sandbox.Spec{Workspace: e.ws.Root(), MountPath: "/workspace"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sb.Close() })
			var turns []model.Message
			n := len(tt.args)
			if tt.status == journal.StatusFailed {
				n = 3 * agent.DefaultMaxRepeats
			}
			for i := range n {
				turns = append(turns, calls(tc(fmt.Sprintf("c%d", i), tt.tool, tt.args[i%len(tt.args)])))
			}
			m := &script{turns: append(turns, answer("done"))}
			id := e.create(&agent.RunCreated{MountPath: "/workspace"})
			p := e.params(m)
			p.Env.Sandbox = sb
			out, err := e.rt.Execute(t.Context(), id, p)
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != tt.status || out.End.Reason != tt.reason {
				t.Fatalf("outcome %v %+v after %d steps", out.Status, out.End, out.State.Steps)
			}
			if nudges := userMessages(t, e.events(id)); len(nudges) != tt.nudges {
				t.Errorf("nudges %q, want %d", nudges, tt.nudges)
			}
			if tt.status == journal.StatusFailed && out.State.Steps != agent.DefaultMaxRepeats {
				t.Errorf("stopped after %d steps, want %d", out.State.Steps, agent.DefaultMaxRepeats)
			}
		})
	}
}
