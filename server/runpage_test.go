package server_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// A run's duration is its working time: a run that answered in 2s, was
// rewound an hour later and continued with a follow-up that took 3s
// took 5s, not the hour in between (fresh-user trial 12, N12 and B15).
func TestRunDurationIsWorkingTime(t *testing.T) {
	e := newEnv(t, nil)
	id := e.journalRun(&agent.RunCreated{Task: "t", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace"})
	t0 := e.events(id)[0].Time
	at := func(d time.Duration, typ journal.Type, v any) journal.Draft {
		dr := draft(t, typ, v)
		dr.Time = t0.Add(d)
		return dr
	}
	answer := &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "done"}}
	steps := []journal.Draft{
		at(2*time.Second, journal.ModelResponded, answer),
		at(2*time.Second, journal.RunCompleted, &agent.RunEnded{Reason: "answer"}),
		at(time.Hour, journal.WorkspaceRestored, &agent.WorkspaceRestored{To: 1, Tree: "0000", Store: filepath.Join(t.TempDir(), "store")}),
	}
	if _, err := e.store.Append(t.Context(), id, 1, steps...); err != nil {
		t.Fatal(err)
	}
	check := func(want time.Duration, when string) {
		t.Helper()
		r, err := e.admin.Run(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.DurationMS != want.Milliseconds() {
			t.Errorf("%s: duration %dms, want %dms", when, r.DurationMS, want.Milliseconds())
		}
		list, err := e.admin.Runs(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range list {
			if l.ID == id && l.DurationMS != r.DurationMS {
				t.Errorf("%s: runs list says %dms, the run %dms", when, l.DurationMS, r.DurationMS)
			}
		}
	}
	check(2*time.Second, "rewound an hour after it completed")
	more := []journal.Draft{
		at(time.Hour+time.Minute, journal.RunResumed, &agent.RunResumed{FollowUp: true}),
		at(time.Hour+time.Minute+3*time.Second, journal.ModelResponded, answer),
		at(time.Hour+time.Minute+3*time.Second, journal.RunCompleted, &agent.RunEnded{Reason: "answer"}),
	}
	if _, err := e.store.Append(t.Context(), id, 4, more...); err != nil {
		t.Fatal(err)
	}
	check(5*time.Second, "after a 3s follow-up")
	if page := e.page("/ui/runs/" + id); !strings.Contains(page, "· 5s ·") {
		t.Errorf("the run page's Usage does not say 5s")
	}
}

// The run page's header shows the task as the conversation does:
// Markdown rendered, its lines kept (a SWE-bench task collapsed to one
// line with literal backticks) (fresh-user trial 12, N12).
func TestRunPageTaskRendered(t *testing.T) {
	e := newEnv(t, nil)
	id := e.journalRun(&agent.RunCreated{Task: "The tests fail: `python3 -m unittest`\n\nSecond paragraph", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace"})
	page := e.page("/ui/runs/" + id)
	if want := `<dd class="task md"><p>The tests fail: <code>python3 -m unittest</code></p>
<p>Second paragraph</p>`; !strings.Contains(page, want) {
		t.Errorf("the header's task is not rendered; want %s in\n%s", want, page)
	}
}

// The run page shows the settings a run was created with: its policy,
// allowed hosts, environment (names only: never a value) and setup script,
// which only runs show --json showed (fresh-user trial 12, N21).
func TestRunPageShowsSettings(t *testing.T) {
	e := newEnv(t, nil)
	id := e.journalRun(&agent.RunCreated{Task: "t", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace",
		Env: []string{"PYTHONPATH=/testbed/src"}, SecretEnv: []string{"API_KEY"}, Network: []string{"pypi.org"},
		Setup: "echo setup-ran", Policy: &agent.PolicyRef{Name: "team.toml", SHA256: "b3a0a00a557d0123"}})
	page := e.page("/ui/runs/" + id)
	_, settings, ok := strings.Cut(page, `id="settings"`)
	if !ok {
		t.Fatalf("the run page has no settings section")
	}
	settings, _, _ = strings.Cut(settings, "</details>")
	for _, want := range []string{"<code>team.toml</code> · sha256 <code>b3a0a00a557d</code>", "<code>pypi.org</code>",
		"<code>PYTHONPATH</code> <code>API_KEY (secret)</code> (values not shown here; journaled, so readers of the run's events see them)", `<pre class="action">echo setup-ran</pre>`} {
		if !strings.Contains(settings, want) {
			t.Errorf("the settings lack %s:\n%s", want, settings)
		}
	}
	// Names only, as keel runs show says them (internal/view): a value
	// typed into the form may be a token.
	if strings.Contains(settings, "/testbed/src") {
		t.Errorf("the settings show an environment variable's value:\n%s", settings)
	}
}
