package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/server/api"
)

// A run's routes take a unique prefix of its id, or the shortened form
// the web UI shows, as well as the whole id; an ambiguous prefix is a
// 400 naming the candidates, an unknown one a 404.
func TestRunIDPrefixes(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	var ids []string
	for range 2 {
		ws := t.TempDir()
		writeDemo(t, ws)
		run, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: demo.Task, Model: "scripted:demo", Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		e.waitStop(run.ID, 1)
		ids = append(ids, run.ID)
	}
	id := ids[0]
	for _, ref := range []string{id, id[:len(id)-1], strings.ToUpper(id[:20]), id[:4] + "…" + id[len(id)-6:]} {
		got, err := e.admin.Run(ctx, ref)
		if err != nil || got.ID != id {
			t.Errorf("GET /v1/runs/%s = %+v, %v; want run %s", ref, got, err, id)
		}
	}
	if _, err := e.admin.Run(ctx, id[:4]); err == nil || !strings.Contains(err.Error(), "matches 2 runs") {
		t.Errorf("an ambiguous prefix: %v, want the candidates", err)
	}
	if _, err := e.admin.Run(ctx, "zzzzzzzz"); !client.IsCode(err, api.CodeNotFound) {
		t.Errorf("an unknown prefix: %v, want not found", err)
	}
	// The web UI's page of a run, by the form it shows.
	code, body := e.uiGet("/ui/runs/"+url.PathEscape(id[:4]+"…"+id[len(id)-6:]), e.secret)
	if code != http.StatusOK || !strings.Contains(body, id) {
		t.Errorf("GET /ui/runs/SHORT = %d, want the run's page", code)
	}
}
