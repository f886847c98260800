package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
)

// A fork's event and a rewind's are required, in the API and the web
// UI's forms alike, as the command line's --at and --to are: absent is
// "required", 0 or less the one refusal of service.CheckSeq; nothing is
// made. A fork without seq made one at the newest event, and a rewind
// without to said "to 0" (newuser report 15, R4).
func TestForkRewindSeqRequired(t *testing.T) {
	e := newEnv(t, nil)
	id := e.journalRun(&agent.RunCreated{Task: "t", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: "none", Principal: identity.LocalAgent},
		draft(t, journal.RunPaused, &agent.RunEnded{Reason: "user"}))
	count := func() int {
		list, err := e.admin.Runs(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	n := count()
	for _, tt := range []struct{ path, body, want string }{
		{"fork", `{}`, "seq is required"},
		{"fork", `{"start":false}`, "seq is required"},
		{"fork", `{"seq":0}`, "seq 0: want an event's sequence number, 1 or more"},
		{"fork", `{"seq":-2}`, "seq -2: want an event's sequence number, 1 or more"},
		{"rewind", `{}`, "to is required"},
		{"rewind", `{"to":0}`, "to 0: want an event's sequence number, 1 or more"},
	} {
		code, body := e.raw(http.MethodPost, "/v1/runs/"+id+"/"+tt.path, e.secret, tt.body)
		if code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
			t.Errorf("POST %s %s: %d %s, want 400 %q", tt.path, tt.body, code, body, tt.want)
		}
	}
	for _, tt := range []struct {
		path string
		form url.Values
		want string
	}{
		{"fork", url.Values{"seq": {""}, "start": {"1"}}, "seq is required"},
		{"fork", url.Values{"seq": {"0"}, "start": {"1"}}, "seq 0: want an event&#39;s sequence number, 1 or more"},
		{"rewind", url.Values{"to": {""}}, "to is required"},
		{"rewind", url.Values{"to": {"0"}}, "to 0: want an event&#39;s sequence number, 1 or more"},
	} {
		code, body := e.uiDo(http.MethodPost, "/ui/runs/"+id+"/"+tt.path, e.secret, tt.form, "same-origin")
		if code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
			t.Errorf("the UI's %s form %v: %d, want 400 %q", tt.path, tt.form, code, tt.want)
		}
	}
	if got := count(); got != n {
		t.Errorf("refused forks made %d run(s)", got-n)
	}
}
