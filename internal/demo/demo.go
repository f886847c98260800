// Package demo holds `keel demo`: a small bundled project with a failing
// test, and a scripted demonstration model that fixes it through Keel's
// real sandbox, tools and journal. The model is scripted: its turns are
// fixed in this package, and no AI model is called.
package demo

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/keel-run/keel/model"
)

//go:embed project project/.gitignore
var project embed.FS

// Task is the demo run's task.
const Task = "The tests of textstats fail: `python3 -m unittest` reports that word_count miscounts text with runs of whitespace or empty text. Fix word_count and check that every test passes."

// Label says plainly what the demo's model is; `keel demo` prints it.
const Label = "SCRIPTED DEMONSTRATION MODEL: the model's turns are fixed in the keel binary; no AI model is called. Everything else (sandbox, tools, journal) is real."

// WriteProject copies the bundled project into dir, which must exist.
func WriteProject(dir string) error {
	return fs.WalkDir(project, "project", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("project", p)
		dst := filepath.Join(dir, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := project.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}

// Model is the scripted demonstration model. It answers the k-th request
// with the k-th scripted turn, where k counts the assistant messages
// already in the request, so a resumed demo run continues where it
// stopped. It reports zero token usage.
//
// It claims only what happened: before each turn it reads the results of
// its earlier calls in the request, and when they are not what its script
// needs (a workspace that is not the bundled project, an edit the policy
// denied or that failed, tests that still fail) it stops with an error
// saying so, and the run fails: a scripted model cannot do anything else,
// and must not say it did. An edit a person denied ends the run with an
// answer saying that nothing changed and the tests still fail.
type Model struct{}

// NewWorkspace makes a fresh copy of the demo project in a new directory
// under parent ("" means the system's temporary directory), a git
// repository with one commit when git is available (the diff of the
// agent's change is a nicety: the demo runs without git), and returns
// its path. When the copy fails, nothing of it is left.
func NewWorkspace(parent string) (string, error) {
	ws, err := os.MkdirTemp(parent, "keel-demo-")
	if err != nil {
		return "", fmt.Errorf("demo workspace: %w", err)
	}
	if err := WriteProject(ws); err != nil {
		os.RemoveAll(ws)
		return "", fmt.Errorf("demo workspace: %w", err)
	}
	_ = GitInit(ws)
	return ws, nil
}

// GitInit makes dir a git repository with its files committed, with no
// user or system git configuration.
func GitInit(dir string) error {
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "-A"},
		{"-c", "user.name=keel demo", "-c", "user.email=demo@keel.invalid", "-c", "commit.gpgsign=false", "commit", "-q", "-m", "textstats before the demo"},
	} {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v: %s", args, err, out)
		}
	}
	return nil
}

// NewModel returns the scripted demonstration model.
func NewModel() *Model { return &Model{} }

// Name implements model.Namer.
func (*Model) Name() string { return "scripted:demo" }

func call(id, name, args string) model.ToolCall {
	return model.ToolCall{ID: id, Name: name, Arguments: args}
}

// buggyLine is the line the script fixes.
const buggyLine = "    return len(text.split(\" \"))"

var script = []model.Message{
	{Content: "[scripted] I will look at the project first.", ToolCalls: []model.ToolCall{
		call("demo_1", "read_file", `{"path": "."}`),
	}},
	{Content: "[scripted] Read the code and run the tests to see the failure.", ToolCalls: []model.ToolCall{
		call("demo_2", "read_file", `{"path": "textstats.py"}`),
		call("demo_3", "bash", `{"command": "python3 -m unittest"}`),
	}},
	{Content: "[scripted] split(\" \") yields empty strings for runs of spaces and for empty text; split() with no argument splits on any whitespace and drops empty parts.", ToolCalls: []model.ToolCall{
		call("demo_4", "edit_file", `{"path": "textstats.py", "old_string": "    return len(text.split(\" \"))", "new_string": "    return len(text.split())"}`),
	}},
	{Content: "[scripted] Run the tests again.", ToolCalls: []model.ToolCall{
		call("demo_5", "bash", `{"command": "python3 -m unittest -v"}`),
	}},
	{Content: "[scripted] word_count now uses str.split() with no separator, so runs of whitespace and empty text are counted correctly; all tests pass."},
}

// check says why turn k of the script cannot follow the results in msgs
// ("" when it can): each turn needs what the calls before it found.
func check(k int, msgs []model.Message) string {
	results := map[string]model.Message{}
	for _, m := range msgs {
		if m.Role == model.RoleTool {
			results[m.ToolCallID] = m
		}
	}
	res := func(id string) (model.Message, bool) { r, ok := results[id]; return r, ok }
	switch k {
	case 1:
		r, ok := res("demo_1")
		if !ok || r.IsError || !strings.Contains(r.Content, "textstats.py") || !strings.Contains(r.Content, "test_textstats.py") {
			return "this workspace is not the demo's bundled project (its listing has no textstats.py and test_textstats.py); the scripted model works only on that project, and changed nothing"
		}
	case 2:
		r, ok := res("demo_2")
		if !ok || r.IsError || !strings.Contains(r.Content, strings.TrimSpace(buggyLine)) {
			return "textstats.py does not have the line the script fixes (" + strings.TrimSpace(buggyLine) + "); the scripted model changed nothing"
		}
	case 3:
		if r, ok := res("demo_4"); !ok || r.IsError {
			return "the edit of textstats.py did not happen (" + firstLine(r.Content) + "); word_count is unchanged, so the tests still fail"
		}
	case 4:
		r, ok := res("demo_5")
		if !ok || r.IsError || !strings.HasPrefix(r.Content, "exit code: 0") {
			return "the tests still fail after the edit (" + firstLine(r.Content) + "); the scripted model cannot fix them"
		}
	}
	return ""
}

// denied reports whether a person denied the script's edit (demo_4),
// which turn k answers, and why.
func denied(k int, msgs []model.Message) (string, bool) {
	if k != 3 {
		return "", false
	}
	for _, m := range msgs {
		if m.Role == model.RoleTool && m.ToolCallID == "demo_4" && m.IsError {
			if rest, ok := strings.CutPrefix(m.Content, "a person denied this call"); ok {
				reason := strings.TrimPrefix(rest, ": ")
				if reason == "" {
					reason = "no reason given"
				}
				return firstLine(reason), true
			}
		}
	}
	return "", false
}

// firstLine is the first line of s, cut short, for an error message.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "no result"
	}
	return s
}

// Generate implements model.Model.
func (*Model) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k := 0
	for _, m := range req.Messages {
		if m.Role == model.RoleAssistant {
			k++
		}
	}
	if n := len(req.Messages); k > 0 && n > 0 && req.Messages[n-1].Role == model.RoleUser && answered(req.Messages) {
		// A follow-up after the script's answer (its last, or the one
		// to a denied edit): the demo says it has no more steps, quoting
		// the person's message.
		msg := model.Message{Role: model.RoleAssistant, Content: fmt.Sprintf("[scripted] Follow-up received: %q. The demo script has no more steps; a real model would act on it now.", req.Messages[n-1].Content)}
		return &model.Response{Message: msg, Model: "scripted:demo", StopReason: stop(msg)}, nil
	}
	if k >= len(script) {
		return nil, &model.Error{Kind: model.KindExhausted, Provider: "scripted", Message: fmt.Sprintf("the demo script has %d turns", len(script))}
	}
	if reason, ok := denied(k, req.Messages); ok {
		// A person said no: the demo ends as a model would, saying
		// what did not happen; no model error.
		msg := model.Message{Role: model.RoleAssistant, Content: "[scripted] You denied the edit of textstats.py (" + reason + "), so the demo stops here: nothing changed, word_count still splits on single spaces, and the tests still fail. Start the demo again (keel demo, or the web UI's Start the demo run) and approve the edit to see the fix made and tested."}
		return &model.Response{Message: msg, Model: "scripted:demo", StopReason: stop(msg)}, nil
	}
	if why := check(k, req.Messages); why != "" {
		return nil, &model.Error{Kind: model.KindMismatch, Provider: "scripted", Message: "the scripted demo stops: " + why}
	}
	offered := map[string]bool{}
	for _, t := range req.Tools {
		offered[t.Name] = true
	}
	msg := script[k]
	for _, c := range msg.ToolCalls {
		if !offered[c.Name] {
			return nil, &model.Error{Kind: model.KindMismatch, Provider: "scripted", Message: "the demo needs the tool " + c.Name}
		}
	}
	msg.Role = model.RoleAssistant
	return &model.Response{Message: msg, Model: "scripted:demo", StopReason: stop(msg)}, nil
}

// answered reports whether the newest assistant message of msgs is an
// answer (no calls): the script ended there, and what follows it is a
// follow-up, not a message within the script.
func answered(msgs []model.Message) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == model.RoleAssistant {
			return len(msgs[i].ToolCalls) == 0
		}
	}
	return false
}

func stop(m model.Message) string {
	if len(m.ToolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}
