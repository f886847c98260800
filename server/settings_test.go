package server_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// The server resumes a run with the execution settings the run has now:
// those of run.created, or of the newest run.resumed that replaced them
// (a keel runs resume with a flag), never its own defaults.
func TestServerResumeUsesRunSettings(t *testing.T) {
	wired := make(chan *agent.Settings, 4)
	var e *env
	e = newEnv(t, &envOptions{opts: func(o *service.Options) {
		withWire(o, func(ctx context.Context, c *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
			wired <- c.Settings
			return e.wire(ctx, c)
		})
	}})
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	created := agent.DefaultSettings()
	created.CommandTimeout = agent.Duration(7 * time.Minute)
	changed := created
	changed.Concurrency = 9
	c := &agent.RunCreated{Task: "wait", Model: "test:idle", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: "none",
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(policy.Default()), Limits: agent.Limits{MaxSteps: 10}, Settings: &created}
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

// closer is an io.Closer calling a function.
type closer func() error

func (c closer) Close() error { return c() }

// A person who resumes a run with a higher limit the moment it stopped at
// its limit, while its execution is still ending (the sandbox being torn
// down), is neither told the run is executing nor loses the resume: the
// server waits for the execution to end, journals the new limits (the
// others kept) with the person, and the run continues to the end.
func TestResumeRaisesLimitWhileExecutionEnds(t *testing.T) {
	ending := make(chan struct{})
	waiting := make(chan struct{})
	var once sync.Once
	var e *env
	e = newEnv(t, &envOptions{opts: func(o *service.Options) {
		withWire(o, func(ctx context.Context, c *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
			p, cl, err := e.wire(ctx, c)
			if err != nil {
				return nil, nil, err
			}
			first := false
			once.Do(func() { first = true })
			if !first {
				return p, cl, nil
			}
			// The first execution ends slowly: until a resume waits.
			return p, closer(func() error { close(ending); <-waiting; return cl.Close() }), nil
		})
	}})
	server.OnIdleWait(e.h, func(string) {
		select {
		case <-waiting:
		default:
			close(waiting)
		}
	})
	e.models.set("test:two", modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("look", modeltest.Call("c1", "read_file", map[string]string{"path": "."})),
		modeltest.Text("done")}, nil))
	c := &agent.RunCreated{Task: "look", Model: "test:two", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: "none",
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(policy.Default()), Limits: agent.Limits{MaxSteps: 1, MaxTokens: 1e6}}
	id := e.journalRun(c, draft(t, journal.RunPaused, &agent.RunEnded{Reason: "shutdown", Message: "paused"}))
	ctx := t.Context()
	if _, err := e.admin.Resume(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	if ev := e.waitType(id, journal.RunFailed); !strings.Contains(string(ev.Payload), "max_steps") {
		t.Fatalf("the run stopped with %s, want max_steps", ev.Payload)
	}
	<-ending
	if _, err := e.admin.Resume(ctx, id, &api.ResumeRun{Limits: &api.Limits{MaxSteps: new(2)}}); err != nil {
		t.Fatalf("resume with --max-steps 2 while the execution ends: %v", err)
	}
	e.waitType(id, journal.RunCompleted)
	events, err := e.store.Read(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got *agent.RunResumed
	for i := range events {
		if events[i].Type == journal.RunResumed {
			v, err := agent.Decode(&events[i])
			if err != nil {
				t.Fatal(err)
			}
			got = v.(*agent.RunResumed)
		}
	}
	want := agent.Limits{MaxSteps: 2, MaxTokens: 1e6}
	if got == nil || got.Limits == nil || *got.Limits != want || got.By == "" {
		t.Errorf("the last run.resumed = %+v, want limits %+v and the person", got, want)
	}
}

// A resume's limits and settings are checked: bad ones are refused with
// the field named, and nothing is journaled.
func TestResumeRefusesBadChanges(t *testing.T) {
	e := newEnv(t, nil)
	c := &agent.RunCreated{Task: "look", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: "none",
		Principal: identity.LocalAgent, Limits: agent.Limits{MaxSteps: 1}}
	id := e.journalRun(c, draft(t, journal.RunPaused, &agent.RunEnded{Reason: "shutdown", Message: "paused"}))
	zero := 0
	for _, tt := range []struct {
		name string
		req  api.ResumeRun
		want string
	}{
		{"negative steps", api.ResumeRun{Limits: &api.Limits{MaxSteps: new(-1)}}, "want 0 (no limit) or more"},
		{"bad timeout", api.ResumeRun{Limits: &api.Limits{Timeout: "soon"}}, "limits.timeout"},
		{"bad command timeout", api.ResumeRun{Settings: &api.Settings{CommandTimeout: "-5s"}}, `settings.command_timeout "-5s": want a positive duration`},
		{"no concurrency", api.ResumeRun{Settings: &api.Settings{Concurrency: &zero}}, "concurrency"},
		{"negative model retries", api.ResumeRun{Settings: &api.Settings{ModelRetries: new(-1)}}, "settings: model retries -1: want 0 (none) or more"},
		{"tiny window", api.ResumeRun{ContextWindow: 10}, "context_window"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.admin.Resume(t.Context(), id, &tt.req)
			if !client.IsCode(err, api.CodeInvalidRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Resume(%+v) = %v, want invalid_request naming %q", tt.req, err, tt.want)
			}
		})
	}
	events, err := e.store.Read(t.Context(), id, 1)
	if err != nil || len(events) != 2 {
		t.Errorf("refused resumes journaled events: %d, %v", len(events), err)
	}
}
