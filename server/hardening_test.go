package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// A run that cannot be set up is refused at create (400, no run) when the
// server's Validate says so; one whose setup fails later ends failed with
// the reason journaled, and a restart does not retry it.
func TestRunsThatCannotStart(t *testing.T) {
	validate := func(_ context.Context, c *agent.RunCreated) error {
		if c.MountPath == "/etc" {
			return fmt.Errorf("%w: mount path /etc is inside /etc, which the sandbox provides itself", service.ErrInvalid)
		}
		return nil
	}
	e := newEnv(t, &envOptions{validate: validate})
	ctx := t.Context()
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	_, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:idle", Workspace: t.TempDir(), MountPath: "/etc"})
	wantAPIError(t, err, api.CodeInvalidRequest, "mount path /etc")
	if runs, _ := e.admin.Runs(ctx, nil); len(runs) != 0 {
		t.Errorf("a refused create left %d runs", len(runs))
	}
	// The test's Prepare accepts a model its wiring then cannot build.
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:unwirable", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	end := e.waitStop(run.ID, 1)
	if end.Type != journal.RunFailed {
		t.Fatalf("the run stopped with %s, want run.failed", end.Type)
	}
	v, _ := agent.Decode(&end)
	if r := v.(*agent.RunEnded); r.Reason != "setup" || !strings.Contains(r.Message, `no test model "test:unwirable"`) {
		t.Errorf("run.failed %+v, want reason setup with the cause", r)
	}
	e2, resumed := e.restart()
	if len(resumed) != 0 {
		t.Errorf("Start() resumed %v; a run that failed to set up must not be retried at every start", resumed)
	}
	got, err := e2.admin.Run(ctx, run.ID)
	if err != nil || got.Status != "failed" {
		t.Errorf("Run() = %+v, %v", got, err)
	}
}

// hookStore calls before once, just before the first append of a run
// that holds an event of type typ, then appends.
type hookStore struct {
	journal.Store
	mu     sync.Mutex
	typ    journal.Type
	before func()
}

func (s *hookStore) Append(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	s.mu.Lock()
	f := s.before
	for _, d := range drafts {
		if d.Type == s.typ && f != nil {
			s.before = nil
			s.mu.Unlock()
			f()
			return s.Store.Append(ctx, runID, after, drafts...)
		}
	}
	s.mu.Unlock()
	return s.Store.Append(ctx, runID, after, drafts...)
}

func (s *hookStore) Lock(ctx context.Context, runID string) (func(), error) {
	return s.Store.(journal.Locker).Lock(ctx, runID)
}

func (s *hookStore) Holder(ctx context.Context, runID string) (string, error) {
	return s.Store.(journal.Locker).Holder(ctx, runID)
}

// A cancel that races an approval wins: the approval lands between the
// cancel's read and its append, the cancel reads again, and the run ends
// canceled instead of executing the approved call. A run executed by
// another process is answered with a plain 409, without the journal's
// own text.
func TestCancelWinsOverARacingApproval(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "keel.db")
	raw, err := sqlite.Open(db, &sqlite.Options{Sync: sqlite.SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	hs := &hookStore{Store: raw, typ: journal.RunCanceled}
	e := newEnvOn(t, hs, dir, db)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStop(run.ID, 1)
	var approveErr error
	hs.mu.Lock()
	hs.typ = journal.ToolFinished // the cancel's first append closes the open call
	hs.before = func() { _, approveErr = e.admin.Approve(ctx, run.ID, "demo_4", nil) }
	hs.mu.Unlock()
	got, err := e.admin.Cancel(ctx, run.ID)
	if err != nil {
		t.Fatalf("Cancel() = %v", err)
	}
	if approveErr != nil {
		t.Errorf("the racing approval: %v", approveErr)
	}
	if got.Status != "canceled" || got.Message != "canceled by ada" {
		t.Errorf("Cancel() = %s %q", got.Status, got.Message)
	}
	// Nothing executes the approved call afterwards.
	e.svc.Shutdown(ctx) //nolint:errcheck // waits for any execution the approval queued
	for _, ev := range e.events(run.ID) {
		if ev.Type == journal.ToolStarted && strings.Contains(string(ev.Payload), "demo_4") {
			t.Errorf("the approved call ran after the cancel: %s", ev.Payload)
		}
	}
	if evs := e.events(run.ID); evs[len(evs)-1].Type != journal.RunCanceled {
		t.Errorf("the run ends with %s, want run.canceled", evs[len(evs)-1].Type)
	}
}

// A cancel of a run that another process executes says so, without the
// journal's internals.
func TestCancelOfARunExecutedElsewhere(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	id := e.askingRun(t.TempDir(), modeltest.Call("c1", "bash", map[string]string{"command": "true"}))
	other, err := sqlite.Open(e.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	unlock, err := other.Lock(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	_, err = e.admin.Cancel(ctx, id)
	wantAPIError(t, err, api.CodeConflict, "another process")
	var ae *api.Error
	if errors.As(err, &ae) {
		err = errors.New(ae.Message)
	}
	for _, internal := range []string{"journal/", "journal:", "append", "after", "newest event", "sqlite", "agent:"} {
		if err != nil && strings.Contains(err.Error(), internal) {
			t.Errorf("the error exposes the journal's internals (%q): %v", internal, err)
		}
	}
}

// newEnvOn is newEnv over store (which wraps the journal at db in dir).
func newEnvOn(t *testing.T, store journal.Store, dir, db string) *env {
	t.Helper()
	return newEnv(t, &envOptions{dir: dir, db: db, store: store})
}

// Smaller rules of the API: limits are not negative, follow and
// Last-Event-ID take only what they mean, a followed stream of a
// completed run ends, the Bearer scheme is case-insensitive, and the
// write scopes include reading.
func TestAPIDetails(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	for _, tt := range []struct{ name, body, want string }{
		{"negative steps", `{"task":"t","workspace":"%s","limits":{"max_steps":-5}}`, "max_steps -5"},
		{"negative tokens", `{"task":"t","workspace":"%s","limits":{"max_tokens":-1}}`, "max_tokens -1"},
		{"negative cost", `{"task":"t","workspace":"%s","limits":{"max_cost":-0.5}}`, "max_cost -0.5"},
		{"negative timeout", `{"task":"t","workspace":"%s","limits":{"timeout":"-1s"}}`, "limits.timeout -1s: want 0 (no limit) or more"},
		{"a label of the server's", `{"task":"t","workspace":"%s","labels":{"keel.demo":"x"}}`, "are Keel's own"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := e.raw(http.MethodPost, "/v1/runs", e.secret, fmt.Sprintf(tt.body, t.TempDir()))
			if code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
				t.Errorf("%d %s, want 400 saying %q", code, body, tt.want)
			}
		})
	}
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := e.waitStop(run.ID, 1)
	path := "/v1/runs/" + run.ID + "/events"
	for _, tt := range []struct {
		name, query string
		header      []string
		status      int
	}{
		{"follow bogus", "?follow=bogus", nil, 400},
		{"follow false", "?follow=false", nil, 200},
		{"Last-Event-ID at the int64 limit", "?follow=false", []string{"Last-Event-ID", "9223372036854775807"}, 400},
		{"Last-Event-ID negative", "?follow=false", []string{"Last-Event-ID", "-2"}, 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if code, body := e.raw(http.MethodGet, path+tt.query, e.secret, "", tt.header...); code != tt.status {
				t.Errorf("%d %s, want %d", code, body, tt.status)
			}
		})
	}
	if _, err := e.admin.Approve(ctx, run.ID, "demo_4", nil); err != nil {
		t.Fatal(err)
	}
	end := e.waitStop(run.ID, asked.Seq+1)
	// Following a completed run ends at its end.
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last journal.Event
	for ev, err := range e.admin.Events(fctx, run.ID, nil) {
		if err != nil {
			t.Fatal(err)
		}
		last = ev
	}
	if fctx.Err() != nil || last.Seq != end.Seq {
		t.Errorf("following a completed run: stopped at %d (%v), want its end %d", last.Seq, fctx.Err(), end.Seq)
	}
	code, body := e.raw(http.MethodGet, path+"?from=999", e.secret, "")
	if code != 200 || !strings.Contains(body, "event: end") {
		t.Errorf("following past a completed run's end: %d %q", code, body)
	}
	// The scheme of Authorization is case-insensitive.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/v1/whoami", nil)
	req.Header.Set("Authorization", "bearer "+e.secret)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("lowercase bearer: %v %v", resp.StatusCode, err)
	}
	// runs:write and approvals:write include runs:read.
	for _, scope := range []string{api.ScopeRunsWrite, api.ScopeApprovalsWrite} {
		c := e.token("only-"+strings.ReplaceAll(scope, ":", "-"), scope)
		if _, err := c.Approvals(ctx); err != nil {
			t.Errorf("%s lists approvals: %v", scope, err)
		}
		if _, err := c.Run(ctx, run.ID); err != nil {
			t.Errorf("%s reads a run: %v", scope, err)
		}
	}
}

// Model specs from the API: replay recordings only from the operator's
// directories (an error says nothing of other files), openai-compatible
// endpoints only those the operator allows; an admin may name any.
func TestModelSpecsFromTheAPI(t *testing.T) {
	recs := t.TempDir()
	if err := os.WriteFile(filepath.Join(recs, "rec.traj.json"), []byte(`{"messages":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, &envOptions{opts: func(o *service.Options) {
		o.ReplayDirs = []string{recs}
		o.ModelBaseURLs = []string{"http://127.0.0.1:11434/v1"}
	}})
	ctx := t.Context()
	writer := e.bound("wendy", []string{identity.LocalAgent}, api.ScopeRunsWrite)
	ws := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("root:$6$hash"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{"replay:/etc/shadow", "replay:" + secret, "replay:/nonexistent", "replay:../" + filepath.Base(filepath.Dir(secret)) + "/secret", "replay:" + recs + "/../x"} {
		_, err := writer.CreateRun(ctx, &api.CreateRun{Task: "t", Model: spec, Workspace: ws})
		wantAPIError(t, err, api.CodeInvalidRequest, "not one of this server's recordings")
		if err != nil && (strings.Contains(err.Error(), "JSON") || strings.Contains(err.Error(), "invalid character") || strings.Contains(err.Error(), "no such file")) {
			t.Errorf("%s: the error reveals the file: %v", spec, err)
		}
	}
	// A recording in the directory, by name, passes the server's checks
	// (the test's Prepare has no such model).
	_, err := writer.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "replay:rec.traj.json", Workspace: ws})
	wantAPIError(t, err, api.CodeInvalidRequest, "no test model \"replay:"+filepath.Join(recs, "rec.traj.json"))
	_, err = writer.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "openai-compatible:m@http://169.254.169.254/v1", Workspace: ws})
	wantAPIError(t, err, api.CodeForbidden, "not one this server's operator allows")
	_, err = writer.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "openai-compatible:m@http://127.0.0.1:11434/v1", Workspace: ws})
	wantAPIError(t, err, api.CodeInvalidRequest, "no test model")
	_, err = e.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "replay:/etc/shadow", Workspace: ws})
	wantAPIError(t, err, api.CodeInvalidRequest, "no test model")
	// The operator's default model is allowed wherever it lives.
	e2 := newEnv(t, &envOptions{opts: func(o *service.Options) { o.DefaultModel = "replay:/srv/default.traj.json" }})
	w2 := e2.bound("wendy", []string{identity.LocalAgent}, api.ScopeRunsWrite)
	_, err = w2.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "replay:/srv/default.traj.json", Workspace: t.TempDir()})
	wantAPIError(t, err, api.CodeInvalidRequest, "no test model")
}

// Cancelling an executing run names the person in run.canceled, as for a
// paused run.
func TestCancelNamesThePerson(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	e.models.set("test:sleep", modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("wait", modeltest.Call("c1", "bash", map[string]string{"command": "sleep 600"})),
	}, nil))
	bob := e.bound("bob", []string{identity.LocalAgent}, api.ScopeRunsWrite)
	run, err := bob.CreateRun(ctx, &api.CreateRun{Task: "sleep", Model: "test:sleep", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e.waitType(run.ID, journal.ToolStarted)
	if _, err := bob.Cancel(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	end := e.waitType(run.ID, journal.RunCanceled)
	v, _ := agent.Decode(&end)
	me, err := bob.Whoami(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := v.(*agent.RunEnded); r.Message != "canceled by bob" || r.By != "bob" || r.Token != me.ID {
		t.Errorf("run.canceled %+v, want canceled by bob with token %s", r, me.ID)
	}
	if !errors.Is(agent.CanceledBy("bob"), agent.ErrUserCanceled) {
		t.Errorf("CanceledBy is not ErrUserCanceled")
	}
}

// The web UI's live timeline reads Last-Event-ID as the API does: a value
// at the int64 limit does not wrap around to replay from event 1.
func TestUIStreamLastEventID(t *testing.T) {
	e := newEnv(t, nil)
	id := e.askingRun(t.TempDir(), modeltest.Call("c1", "bash", map[string]string{"command": "true"}))
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.srv.URL+"/ui/runs/"+id+"/stream", nil)
	req.AddCookie(e.cookie(e.secret))
	req.Header.Set("Last-Event-ID", "9223372036854775807")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("Last-Event-ID at the limit: %d, want 400", resp.StatusCode)
	}
}
