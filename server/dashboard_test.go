package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
)

// The runs dashboard filters by status, agent and words of the task, and
// charts today's runs and their cost.
func TestRunsDashboard(t *testing.T) {
	e := newEnv(t, nil)
	asking := e.askingRun(t.TempDir(), modeltest.Call("c1", "write_file", map[string]string{"path": "a", "content": "b"}))
	done := e.journalRun(&agent.RunCreated{Task: "summarise the notes", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace"},
		draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "done"}, Cost: 0.25}),
		draft(t, journal.RunCompleted, &agent.RunEnded{Reason: "answer"}))
	for _, tt := range []struct {
		query    string
		has, not []string
	}{
		{"", []string{asking, done, `id="runs-chart"`, "2 run(s), $0.2500"}, nil},
		{"?status=completed", []string{done, "1 run(s), $0.2500"}, []string{asking}},
		{"?status=waiting", []string{asking}, []string{done}},
		{"?q=NOTES", []string{done}, []string{asking}},
		{"?agent=nobody", nil, []string{asking, done}},
	} {
		page := e.page("/ui/runs" + tt.query)
		for _, id := range tt.has {
			if !strings.Contains(page, id) {
				t.Errorf("/ui/runs%s lacks %s", tt.query, id)
			}
		}
		for _, id := range tt.not {
			if strings.Contains(page, `data-run="`+id) {
				t.Errorf("/ui/runs%s shows %s", tt.query, id)
			}
		}
	}
	// The refresh keeps the filter.
	if page := e.page("/ui/runs?status=completed"); !strings.Contains(page, `data-refresh="/ui/runs?fragment=1&amp;status=completed`) {
		t.Error("the list's refresh drops the filter")
	}
}

// A page the UI does not have is the UI's own page (with its navigation
// and 404), behind sign-in; the built-in agents show no zero time.
func TestUIUnknownPageAndBuiltInAgents(t *testing.T) {
	e := newEnv(t, nil)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.srv.URL+"/ui/nonexistent", nil)
	req.AddCookie(e.cookie(e.secret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "no page GET /ui/nonexistent") || !strings.Contains(string(b), `href="/ui/runs"`) {
		t.Errorf("/ui/nonexistent: %d\n%s", resp.StatusCode, b)
	}
	// Without a session: to the sign-in page, as every UI page.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noRedirect.Get(e.srv.URL + "/ui/nonexistent")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login") {
		t.Errorf("/ui/nonexistent without a session: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if page := e.page("/ui/agents"); strings.Contains(page, "0001-01-01") || !strings.Contains(page, "built in") {
		t.Errorf("/ui/agents shows a zero time or no built-in agent:\n%s", page)
	}
}
