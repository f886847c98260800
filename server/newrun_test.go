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
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// The web UI's New-run form keeps what was typed when the server refuses
// it, and sets a run's mount path, environment, setup, allowed hosts and
// policy as the API does.
func TestNewRunForm(t *testing.T) {
	e := newEnv(t, nil)
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	form := url.Values{"task": {"fix the <failing> test"}, "model": {"test:idle"}, "workspace": {"/nonexistent/dir"}, "mount_path": {"/testbed"},
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
		`value="test:idle"`, `value="/nonexistent/dir"`, `value="/testbed"`, "PYTHONPATH=src", "LANG=C.UTF-8",
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
	got := []any{c.MountPath, c.Env, c.Setup, c.Network, c.Limits.MaxSteps}
	want := []any{"/testbed", []string{"PYTHONPATH=src", "LANG=C.UTF-8"}, "true", []string{"pypi.org", "files.pythonhosted.org"}, 7}
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

// A policy that denies every ordinary call, or has a rule that cannot be
// evaluated, is refused when the run is created through the API or the
// web UI's form, as keel run refuses it: a 400, no run, no model call.
// The form's Policy field takes a policy file's content or bare Cedar
// rules, as its label says.
func TestPolicyThatDeniesEverythingRefused(t *testing.T) {
	e := newEnv(t, nil)
	scripted := modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil)
	e.models.set("test:idle", scripted)
	ws := t.TempDir()
	denyAll := `@id("nothing") forbid (principal, action, resource);` + "\n" + `@id("all") permit (principal, action, resource);`
	typo := `@id("all") permit (principal, action, resource);` + "\n" + `@id("typo") forbid (principal, action, resource) when { context.sandbx == "none" };`
	for _, tt := range []struct{ name, src, want string }{
		{"deny-all cedar", denyAll, "it denies every one of 13 ordinary calls"},
		{"deny-all file", "version = 1\ncedar = '''\n" + denyAll + "\n'''\n", "it denies every one of 13 ordinary calls"},
		{"typo cedar", typo, "rule typo cannot be evaluated"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.admin.CreateRun(t.Context(), &api.CreateRun{Task: "t " + tt.name, Model: "test:idle", Workspace: ws, Policy: tt.src})
			wantAPIError(t, err, api.CodeInvalidRequest, tt.want)
			form := url.Values{"task": {"form " + tt.name}, "model": {"test:idle"}, "workspace": {ws}, "policy": {tt.src}}
			code, body := e.uiDo(http.MethodPost, "/ui/runs/new", e.secret, form, "same-origin")
			if code != http.StatusBadRequest || !strings.Contains(body, tt.want) || !strings.Contains(body, "nothing ran") {
				t.Errorf("the form with the policy: %d, want 400 saying %q\n%s", code, tt.want, body)
			}
		})
	}
	runs, err := e.admin.Runs(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 0 || len(scripted.Requests()) != 0 {
		t.Errorf("%d run(s) created and %d model call(s), want none", len(runs), len(scripted.Requests()))
	}
	if page := e.page("/ui/runs"); !strings.Contains(page, "a policy file's content") || strings.Contains(page, "Cedar text") {
		t.Errorf("the Policy field does not say what it takes")
	}
	// Bare Cedar rules that allow ordinary calls make a run, recorded so
	// that it decides by them as Cedar.
	run, err := e.admin.CreateRun(t.Context(), &api.CreateRun{Task: "t", Model: "test:idle", Workspace: ws,
		Policy: `@id("all") permit (principal, action, resource);`})
	if err != nil {
		t.Fatal(err)
	}
	if c := created(t, e, run.ID); c.Policy.Name != "api:policy.cedar" {
		t.Errorf("the run's policy is %q, want api:policy.cedar", c.Policy.Name)
	}
	e.waitStop(run.ID, 1)
	// Named by its file (a client's --policy FILE), a policy is read as
	// keel run reads that file, refused and recorded under its name.
	_, err = e.admin.CreateRun(t.Context(), &api.CreateRun{Task: "t", Model: "test:idle", Workspace: ws, Policy: "this is not cedar", PolicyFile: "/home/ann/team.cedar"})
	wantAPIError(t, err, api.CodeInvalidRequest, "/home/ann/team.cedar:")
	run, err = e.admin.CreateRun(t.Context(), &api.CreateRun{Task: "t", Model: "test:idle", Workspace: ws,
		Policy: `@id("all") permit (principal, action, resource);`, PolicyFile: "/home/ann/team.cedar"})
	if err != nil {
		t.Fatal(err)
	}
	if c := created(t, e, run.ID); c.Policy.Name != "/home/ann/team.cedar" {
		t.Errorf("the run's policy is %q, want its file's name", c.Policy.Name)
	}
	e.waitStop(run.ID, 1)
}

// A multi-line task typed into the New-run form is journaled with the
// newlines it was typed with, not the CRLF of the browser's form
// encoding; and the address a refused form leaves the browser at,
// /ui/runs/new, opens the form again when reloaded.
func TestNewRunFormTextAndReload(t *testing.T) {
	e := newEnv(t, nil)
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	form := url.Values{"task": {"fix the bug\r\nsecond line\r\n"}, "model": {"test:idle"}, "workspace": {t.TempDir()},
		"setup": {"echo a\r\necho b"}, "sandbox": {"none"}}
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
	if diff := cmp.Diff([]string{"fix the bug\nsecond line\n", "echo a\necho b"}, []string{c.Task, c.Setup}); diff != "" {
		t.Errorf("task and setup as journaled (-want +got):\n%s", diff)
	}
	e.waitStop(id, 1)

	code, body, resp = e.uiResp(http.MethodGet, "/ui/runs/new", e.secret, nil, "")
	if code != http.StatusSeeOther {
		t.Fatalf("GET /ui/runs/new: %d, want a redirect to the form\n%s", code, body)
	}
	page := e.page(resp.Header.Get("Location"))
	if want := `<details class="card" id="new-run" open>`; !strings.Contains(page, want) {
		t.Errorf("%s does not open the New-run form", resp.Header.Get("Location"))
	}
}

// A New-run form with several bad fields says every problem at once,
// each at its field, and keeps what was typed: not one problem per try
// (fresh-user trial 12, N11).
func TestNewRunFormAllErrorsAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	form := url.Values{"task": {"  "}, "model": {"test:nosuch"}, "workspace": {"/etc"}, "mount_path": {"testbed"},
		"env": {"A=1\r\nBADLINE\r\n"}, "policy": {"bad cedar (("}, "max_steps": {"seven"}}
	code, body := e.uiDo(http.MethodPost, "/ui/runs/new", e.secret, form, "same-origin")
	if code != http.StatusBadRequest {
		t.Fatalf("a form with bad fields: %d, want 400\n%s", code, body)
	}
	for _, field := range []string{"model", "workspace", "mount_path", "env", "policy", "limits"} {
		if !strings.Contains(body, `data-field="`+field+`"`) {
			t.Errorf("the form does not mark field %s", field)
		}
	}
	for _, want := range []string{"6 fields need a change", "not under one of this server&#39;s workspace roots", "must be absolute",
		"env &#34;BADLINE&#34;: want KEY=VALUE", `want a number`, `value="seven"`, `value="/etc"`, ">bad cedar ((</textarea>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the refused form's page lacks %q", want)
		}
	}
	// A known model without a task: the task is marked too.
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	form.Set("model", "test:idle")
	if _, body := e.uiDo(http.MethodPost, "/ui/runs/new", e.secret, form, "same-origin"); !strings.Contains(body, `data-field="task"`) ||
		strings.Contains(body, `data-field="model"`) {
		t.Errorf("a missing task with a good model: want only the task marked, not the model\n%s", body)
	}
	if runs, err := e.admin.Runs(t.Context(), nil); err != nil || len(runs) != 0 {
		t.Errorf("runs %v (%v), want none", runs, err)
	}
}

// The New-run form offers the operator's secrets by name (checked boxes
// survive a refusal), a secret for a host adds its host to the allowed
// ones, and a server that offers none says how an operator offers one.
func TestNewRunFormSecrets(t *testing.T) {
	e := newEnv(t, &envOptions{opts: func(o *service.Options) {
		o.SecretEnv = []string{"API_KEY"}
		o.SecretHosts = []agent.SecretHost{{Name: "GH_TOKEN", Host: "api.github.com"}}
	}})
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	code, body := e.uiGet("/ui/runs", e.secret)
	if code != http.StatusOK {
		t.Fatalf("runs page: %d", code)
	}
	for _, want := range []string{`name="secret_env:API_KEY"`, `name="secret_host:GH_TOKEN=api.github.com"`, "Environment values are journaled"} {
		if !strings.Contains(body, want) {
			t.Errorf("the New-run form lacks %q", want)
		}
	}
	form := url.Values{"task": {"t"}, "model": {"test:idle"}, "workspace": {t.TempDir()},
		"secret_env:API_KEY": {"1"}, "secret_host:GH_TOKEN=api.github.com": {"1"}}
	code, body = e.uiDo(http.MethodPost, "/ui/runs/new", e.secret, form, "same-origin")
	if code != http.StatusBadRequest || !strings.Contains(body, "GH_TOKEN=api.github.com: needs the linux sandbox") {
		t.Fatalf("a secret for a host in sandbox none: %d, want 400 naming it\n%s", code, body)
	}
	for _, want := range []string{`name="secret_env:API_KEY" value="1" checked`, `name="secret_host:GH_TOKEN=api.github.com" value="1" checked`} {
		if !strings.Contains(body, want) {
			t.Errorf("the refused form lost %q", want)
		}
	}
	form.Del("secret_host:GH_TOKEN=api.github.com")
	code, body, resp := e.uiResp(http.MethodPost, "/ui/runs/new", e.secret, form, "same-origin")
	id, ok := strings.CutPrefix(resp.Header.Get("Location"), "/ui/runs/")
	if code != http.StatusSeeOther || !ok {
		t.Fatalf("a secret in the sandbox: %d to %q\n%s", code, resp.Header.Get("Location"), body)
	}
	v, err := agent.Decode(&e.events(id)[0])
	if err != nil {
		t.Fatal(err)
	}
	if c := v.(*agent.RunCreated); !cmp.Equal(c.SecretEnv, []string{"API_KEY"}) || len(c.Network) != 0 {
		t.Errorf("run.created secret_env %q network %q, want [API_KEY] and no host", c.SecretEnv, c.Network)
	}

	none := newEnv(t, nil)
	if _, body := none.uiGet("/ui/runs", none.secret); !strings.Contains(body, "This server offers none") || strings.Contains(body, `name="secret_env:`) {
		t.Errorf("a server with no secrets: the form should say how an operator offers one\n%s", body)
	}
}
