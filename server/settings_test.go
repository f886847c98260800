package server_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
)

// The server resumes a run with the execution settings the run has now:
// those of run.created, or of the newest run.resumed that replaced them
// (a keel runs resume with a flag), never its own defaults.
func TestServerResumeUsesRunSettings(t *testing.T) {
	wired := make(chan *agent.Settings, 4)
	var e *env
	e = newEnv(t, &envOptions{opts: func(o *server.Options) {
		o.Wire = func(ctx context.Context, c *agent.RunCreated) (*agent.ExecParams, io.Closer, error) {
			wired <- c.Settings
			return e.wire(ctx, c)
		}
	}})
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	created := agent.DefaultSettings()
	created.CommandTimeout = agent.Duration(7 * time.Minute)
	changed := created
	changed.Concurrency = 9
	c := &agent.RunCreated{Task: "wait", Model: "test:idle", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: "none",
		Principal: identity.LocalAgent, Limits: agent.Limits{MaxSteps: 10}, Settings: &created}
	id := e.journalRun(c, draft(t, journal.RunResumed, &agent.RunResumed{Settings: &changed}),
		draft(t, journal.RunPaused, &agent.RunEnded{Reason: "shutdown", Message: "paused"}))
	if _, err := e.admin.Resume(t.Context(), id, &api.ResumeRun{}); err != nil {
		t.Fatal(err)
	}
	e.waitType(id, journal.RunCompleted)
	if got := <-wired; got == nil || *got != changed {
		t.Fatalf("the server wired the run with settings %+v, want %+v", got, changed)
	}
}
