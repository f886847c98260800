package server_test

import (
	"errors"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/memory"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// Memory on a team server is per tenant: a token sees (and edits and
// forgets) only the scopes its agents' runs see; an admin sees every
// scope; the web UI's memory pages show and change the same.
func TestMemoryTenants(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	ms := memory.New(e.store, nil)
	underRoot := filepath.Join(filepath.Dir(e.dir), "proj")
	ids := map[memory.Scope]string{}
	for _, sc := range []memory.Scope{memory.AgentScope("alpha"), memory.AgentUserScope("alpha", "bob"), memory.AgentUserScope("alpha", "carol"),
		memory.AgentScope("beta"), memory.UserScope("bob"), memory.UserScope("carol"), memory.ProjectScope(underRoot), memory.ProjectScope("/elsewhere/proj"), memory.TeamScope} {
		en, err := ms.Write(ctx, &memory.WriteParams{Scope: sc, Text: "note of " + string(sc), Source: memory.Source{Run: "run_x", Agent: "alpha"},
			Labels: agent.MemoryLabels{Integrity: memory.Untrusted}})
		if err != nil {
			t.Fatal(err)
		}
		ids[sc] = en.ID
	}
	for _, a := range []string{"alpha", "beta"} {
		if _, err := e.admin.CreateAgent(ctx, &api.CreateAgent{Name: a}); err != nil {
			t.Fatal(err)
		}
	}
	bob := e.bound("bob", []string{"alpha"}, api.ScopeRunsRead, api.ScopeApprovalsWrite)
	reader := e.bound("bob", []string{"alpha"}, api.ScopeRunsRead)

	scopesOf := func(c *client.Client) []string {
		t.Helper()
		list, err := c.Memory(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, en := range list {
			out = append(out, en.Scope)
		}
		return out
	}
	want := []string{"agent:alpha", "agent:alpha/user:bob", "user:bob", "project:" + underRoot, "team"}
	if got := scopesOf(bob); !slices.Equal(got, want) {
		t.Errorf("bob sees %v, want %v", got, want)
	}
	if got := scopesOf(e.admin); len(got) != len(ids) {
		t.Errorf("the admin sees %v", got)
	}
	list, _ := bob.Memory(ctx, &client.MemoryParams{Scopes: []string{"team"}})
	if len(list) != 1 || list[0].Labels.Integrity != "untrusted" || list[0].Source.Run != "run_x" {
		t.Errorf("bob's team entries: %+v", list)
	}
	if _, err := bob.Memory(ctx, &client.MemoryParams{Scopes: []string{"nope"}}); !isCode(err, api.CodeInvalidRequest) {
		t.Errorf("a malformed scope: %v", err)
	}

	// Another tenant's entries do not exist for bob.
	for _, sc := range []memory.Scope{memory.AgentScope("beta"), memory.UserScope("carol"), memory.AgentUserScope("alpha", "carol"), memory.ProjectScope("/elsewhere/proj")} {
		id := ids[sc]
		if _, err := bob.MemoryEntry(ctx, id); !isCode(err, api.CodeNotFound) {
			t.Errorf("bob shows %s's entry: %v", sc, err)
		}
		if err := bob.ForgetMemory(ctx, id, "mine now"); !isCode(err, api.CodeNotFound) {
			t.Errorf("bob forgets %s's entry: %v", sc, err)
		}
		if _, err := bob.EditMemory(ctx, id, "rewritten"); !isCode(err, api.CodeNotFound) {
			t.Errorf("bob edits %s's entry: %v", sc, err)
		}
	}

	// Edit and forget need approvals:write.
	if err := reader.ForgetMemory(ctx, ids[memory.TeamScope], ""); !isCode(err, api.CodeForbidden) {
		t.Errorf("a read-only token forgets: %v", err)
	}
	ne, err := bob.EditMemory(ctx, ids[memory.AgentScope("alpha")], "alpha's note, corrected")
	if err != nil || ne.Supersedes != ids[memory.AgentScope("alpha")] || ne.Source.By != "bob" || ne.Labels.Integrity != "untrusted" {
		t.Fatalf("edit = %+v, %v (want a new version by bob, labels kept)", ne, err)
	}
	if _, err := bob.EditMemory(ctx, ids[memory.AgentScope("alpha")], "again"); !isCode(err, api.CodeConflict) {
		t.Errorf("editing a superseded version: %v", err)
	}
	h, err := bob.MemoryEntry(ctx, ne.ID)
	if err != nil || len(h.Versions) != 2 || h.Versions[0].SupersededBy != ne.ID {
		t.Errorf("history = %+v, %v", h, err)
	}
	if err := bob.ForgetMemory(ctx, ids[memory.TeamScope], "poisoned"); err != nil {
		t.Fatal(err)
	}
	// Twice is a conflict that says when it was forgotten, not a second
	// "forgot".
	if err := bob.ForgetMemory(ctx, ids[memory.TeamScope], "again"); !isCode(err, api.CodeConflict) || !strings.Contains(err.Error(), "already forgotten") {
		t.Errorf("forget twice: %v", err)
	}
	if got := scopesOf(bob); slices.Contains(got, "team") {
		t.Errorf("a forgotten entry is listed: %v", got)
	}
	all, _ := bob.Memory(ctx, &client.MemoryParams{All: true})
	var forgotten *api.MemoryEntry
	for i := range all {
		if all[i].ID == ids[memory.TeamScope] {
			forgotten = &all[i]
		}
	}
	if forgotten == nil || forgotten.Forgotten == nil || forgotten.Forgotten.By != "bob" || forgotten.Forgotten.Reason != "poisoned" {
		t.Errorf("the forgotten entry with all: %+v", forgotten)
	}
	if evs := e.events(service.ActionStream); !strings.Contains(eventsText(evs), "memory.forget") || !strings.Contains(eventsText(evs), "memory.edit") {
		t.Errorf("the API's log lacks the memory actions")
	}

	// The web UI: the list and an entry, and its forms.
	sec := e.newToken("bob", []string{"alpha"}, api.ScopeRunsRead, api.ScopeApprovalsWrite)
	code, body := e.uiGet("/ui/memory", sec)
	if code != http.StatusOK || !strings.Contains(body, `data-id="`+ne.ID+`"`) || strings.Contains(body, ids[memory.AgentScope("beta")]) || !strings.Contains(body, `data-integrity="untrusted"`) {
		t.Errorf("/ui/memory = %d\n%s", code, body)
	}
	if code, _ := e.uiGet("/ui/memory/"+ids[memory.UserScope("carol")], sec); code != http.StatusNotFound {
		t.Errorf("bob's page of carol's entry = %d", code)
	}
	code, body = e.uiGet("/ui/memory/"+ne.ID, sec)
	if code != http.StatusOK || !strings.Contains(body, "alpha&#39;s note, corrected") || !strings.Contains(body, `id="forget-memory"`) {
		t.Errorf("/ui/memory/ID = %d\n%s", code, body)
	}
	code, _, resp := e.uiResp(http.MethodPost, "/ui/memory/"+url.PathEscape(ne.ID)+"/edit", sec, url.Values{"text": {"third version"}}, "same-origin")
	if code != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/memory/mem_") {
		t.Fatalf("edit form = %d %s", code, resp.Header.Get("Location"))
	}
	if code, _ := e.uiDo(http.MethodPost, "/ui/memory/"+url.PathEscape(ids[memory.UserScope("bob")])+"/forget", sec, url.Values{"reason": {"stale"}}, "same-origin"); code != http.StatusSeeOther {
		t.Errorf("forget form = %d", code)
	}
	if got := scopesOf(bob); slices.Contains(got, "user:bob") || !slices.Contains(got, "agent:alpha") {
		t.Errorf("after the forms bob sees %v", got)
	}
}

func isCode(err error, code string) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == code
}

func eventsText(evs []journal.Event) string {
	var b strings.Builder
	for _, e := range evs {
		b.Write(e.Payload)
	}
	return b.String()
}
