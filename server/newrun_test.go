package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
)

// The web UI's New-run form keeps what was typed when the server refuses
// it, and sets a run's environment, setup, allowed hosts and policy as
// the API does.
func TestNewRunForm(t *testing.T) {
	e := newEnv(t, nil)
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	form := url.Values{"task": {"fix the <failing> test"}, "model": {"test:idle"}, "workspace": {"/nonexistent/dir"},
		"env": {"PYTHONPATH=src\r\n\r\n  LANG=C.UTF-8 \r\n"}, "setup": {"true"}, "network": {"pypi.org, files.pythonhosted.org"},
		"policy": {"default"}, "sandbox": {"none"}, "max_steps": {"7"}}
	code, body := e.uiDo(http.MethodPost, "/ui/runs/new", e.secret, form, "same-origin")
	if code != http.StatusBadRequest {
		t.Fatalf("a workspace outside the roots: %d, want 400\n%s", code, body)
	}
	for _, want := range []string{
		"not under one of this server&#39;s workspace roots",
		`<details class="card" id="new-run" open>`,
		`placeholder="what the agent should do">fix the &lt;failing&gt; test</textarea>`,
		`value="test:idle"`, `value="/nonexistent/dir"`, "PYTHONPATH=src", "LANG=C.UTF-8",
		`value="pypi.org, files.pythonhosted.org"`, ">default</textarea>", `<option value="none" selected>`, `value="7"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the refused form's page lacks %q", want)
		}
	}
	// A form not a number keeps what was typed too.
	bad := url.Values{"task": {"t"}, "workspace": {"/w"}, "max_steps": {"seven"}}
	if code, body := e.uiDo(http.MethodPost, "/ui/runs/new", e.secret, bad, "same-origin"); code != http.StatusBadRequest ||
		!strings.Contains(body, `want a number`) || !strings.Contains(body, `value="seven"`) {
		t.Errorf("steps not a number: %d, want 400 keeping the form\n%s", code, body)
	}

	form.Set("workspace", t.TempDir())
	code, body, resp := e.uiResp(http.MethodPost, "/ui/runs/new", e.secret, form, "same-origin")
	id, ok := strings.CutPrefix(resp.Header.Get("Location"), "/ui/runs/")
	if code != http.StatusSeeOther || !ok {
		t.Fatalf("a good form: %d to %q\n%s", code, resp.Header.Get("Location"), body)
	}
	v, err := agent.Decode(&e.events(id)[0])
	if err != nil {
		t.Fatal(err)
	}
	c := v.(*agent.RunCreated)
	got := []any{c.Env, c.Setup, c.Network, c.Limits.MaxSteps}
	want := []any{[]string{"PYTHONPATH=src", "LANG=C.UTF-8"}, "true", []string{"pypi.org", "files.pythonhosted.org"}, 7}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("run.created (-want +got):\n%s", diff)
	}
	e.waitStop(id, 1)
}

// The Fork form offers an event a run can be forked and started from:
// for a completed run, the one before its completion.
func TestForkFormDefault(t *testing.T) {
	e := newEnv(t, nil)
	done := e.journalRun(&agent.RunCreated{Task: "t", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace"},
		draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "done"}}),
		draft(t, journal.RunCompleted, &agent.RunEnded{Reason: "answer"}))
	page := e.page("/ui/runs/" + done)
	if want := `<input name="seq" type="number" min="1" max="3" value="2">`; !strings.Contains(page, want) {
		t.Errorf("the completed run's Fork form lacks %s", want)
	}
}
