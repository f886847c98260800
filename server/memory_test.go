package server_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/memory"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/tool"
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

// searchResult returns what memory_search answers query with, in a run
// with scopes (the tool itself, on ms).
func searchResult(t *testing.T, ms *memory.Store, scopes memory.Scopes, query string) string {
	t.Helper()
	reg := tool.NewRegistry()
	memory.AddTools(reg, &memory.ToolParams{Store: ms, Scopes: scopes})
	res, err := reg.Run(t.Context(), memory.SearchTool, &tool.Request{Arguments: []byte(`{"query":` + strconv.Quote(query) + `}`), Env: &tool.Env{}})
	if err != nil || res.IsError {
		t.Fatalf("memory_search %q = %+v, %v", query, res, err)
	}
	return res.Content
}

func eventsText(evs []journal.Event) string {
	var b strings.Builder
	for _, e := range evs {
		b.Write(e.Payload)
	}
	return b.String()
}

// The text of a memory entry a token may not see is not in what it
// reads of the run that was offered, wrote or found it: the events
// (verified by the client all the same), their tree stream, the run's
// pending approvals, the approvals list and the run page. A token that
// sees the scope, and an admin, read it all.
func TestMemoryHiddenInRunEvents(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	if _, err := e.admin.CreateAgent(ctx, &api.CreateAgent{Name: "alpha"}); err != nil {
		t.Fatal(err)
	}
	ms := memory.New(e.store, nil)
	found, err := ms.Write(ctx, &memory.WriteParams{Scope: memory.AgentScope("alpha"), Text: "SECRET-S deploy with \"make ship\"",
		Labels: agent.MemoryLabels{Integrity: memory.Trusted}})
	if err != nil {
		t.Fatal(err)
	}
	team, err := ms.Write(ctx, &memory.WriteParams{Scope: memory.TeamScope, Text: "TEAM-VISIBLE deploy from the staging host",
		Labels: agent.MemoryLabels{Integrity: memory.Trusted}})
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	write := `{"text":"SECRET-W tests run with pytest -q"}`
	pending := `{"text":"SECRET-A the admin password rotates on fridays","scope":"agent"}`
	c := &agent.RunCreated{Task: "remember", Model: "test:none", Workspace: ws, MountPath: "/workspace", Sandbox: e.sandbox,
		Principal: "alpha", Policy: agent.NewPolicyRef(e.policy), Limits: agent.Limits{MaxSteps: 10},
		Recall: &agent.Recall{Scopes: []string{"agent:alpha", "team"}, Entries: []agent.RecalledMemory{
			{ID: found.ID, Scope: "agent:alpha", Text: "SECRET-S deploy with"}, {ID: team.ID, Scope: "team", Text: team.Text, Full: true}}}}
	calls := []model.ToolCall{{ID: "w1", Name: memory.WriteTool, Arguments: write}, {ID: "s1", Name: memory.SearchTool, Arguments: `{"query":"deploy"}`}}
	id := e.journalRun(c,
		draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: calls},
			MemoryUsed: []agent.MemoryUse{{ID: found.ID, How: "quoted", Term: "ship"}}}),
		draft(t, journal.ToolStarted, &agent.ToolStarted{CallID: "w1", Tool: memory.WriteTool, Arguments: json.RawMessage(write)}),
		draft(t, journal.ToolFinished, &agent.ToolFinished{CallID: "w1", Tool: memory.WriteTool, Result: tool.Result{Content: "kept as [memory:mem_x] in agent:alpha"}}),
		draft(t, journal.ToolStarted, &agent.ToolStarted{CallID: "s1", Tool: memory.SearchTool, Arguments: json.RawMessage(`{"query":"deploy"}`)}),
		draft(t, journal.ToolFinished, &agent.ToolFinished{CallID: "s1", Tool: memory.SearchTool,
			Result: tool.Result{Content: searchResult(t, ms, memory.Scopes{Agent: "alpha"}, "deploy")}}),
		draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant,
			ToolCalls: []model.ToolCall{{ID: "w2", Name: memory.WriteTool, Arguments: pending}}}}),
		draft(t, journal.ApprovalRequested, &agent.ApprovalRequested{CallID: "w2", Tool: memory.WriteTool, Arguments: json.RawMessage(pending), Reason: "a person approves this"}),
		draft(t, journal.RunPaused, &agent.RunEnded{Reason: "approval", Message: "waiting; recalled: " + found.Text}))
	// The entry the run wrote (after its call: the stream showed the
	// call before the entry existed).
	if _, err := ms.Write(ctx, &memory.WriteParams{Scope: memory.AgentScope("alpha"), Text: "SECRET-W tests run with pytest -q",
		Labels: agent.MemoryLabels{Integrity: memory.Trusted}, Source: memory.Source{Run: id, Call: "w1", Agent: "alpha"}}); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"SECRET-W", "SECRET-S", "SECRET-A", "ship"}

	read := func(c *client.Client) string {
		t.Helper()
		var b strings.Builder
		n := 0
		for ev, err := range c.Events(ctx, id, &client.EventsParams{NoFollow: true}) {
			if err != nil {
				t.Fatalf("events: %v", err)
			}
			b.Write(ev.Payload)
			n++
		}
		if n != 9 {
			t.Errorf("%d events, want 9", n)
		}
		r, err := c.Run(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.Pending {
			b.Write(p.Arguments)
		}
		runs, err := c.Runs(ctx, nil)
		if err != nil || len(runs) != 1 {
			t.Fatalf("runs = %v, %v", runs, err)
		}
		b.WriteString(r.Message + runs[0].Message + runs[0].Output)
		for _, p := range runs[0].Pending {
			b.Write(p.Arguments)
		}
		list, err := c.Approvals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list {
			b.Write(p.Arguments)
		}
		return b.String()
	}
	readerSecret := e.newToken("rita", nil, api.ScopeRunsRead)
	got := read(e.client(readerSecret))
	for _, s := range secrets {
		if strings.Contains(got, s) {
			t.Errorf("a token that may not see agent:alpha reads %q in the run:\n%s", s, got)
		}
	}
	if !strings.Contains(got, "TEAM-VISIBLE") || !strings.Contains(got, "not yours to see") {
		t.Errorf("the reader's view lacks the team entry or the notes:\n%s", got)
	}
	if code, body := e.raw(http.MethodGet, "/v1/runs/"+id+"/events?follow=false&tree=true", readerSecret, ""); code != http.StatusOK || strings.Contains(body, "SECRET") {
		t.Errorf("tree stream = %d\n%s", code, body)
	}
	if code, body := e.uiGet("/ui/runs/"+id, readerSecret); code != http.StatusOK || strings.Contains(body, "SECRET") || !strings.Contains(body, "TEAM-VISIBLE") {
		t.Errorf("run page = %d\n%s", code, body)
	}
	for name, c := range map[string]*client.Client{"the admin": e.admin, "alpha's token": e.bound("al", []string{"alpha"}, api.ScopeRunsRead)} {
		got := read(c)
		for _, s := range secrets {
			if !strings.Contains(got, s) {
				t.Errorf("%s does not read %q in the run", name, s)
			}
		}
	}
}

// What a run shows of memory to a token that may not see it is decided
// by what the run itself was offered, found or wrote, never by matching
// text against other scopes (a new user's report: a token bound to an
// agent could not read its own agent's memory_write, because another
// agent's entry had the same words, and saw that entry's id; and any
// run quoting a guessed text was redacted iff another tenant's memory
// held it). Two agents hold the same text; beta's run writes it and
// echoes alpha's other, hidden entry word for word: beta's token reads
// the run whole, unmarked; a token that may not see agent:beta reads
// beta's memory as a note naming no entry, and the echo (which no
// memory of the run holds) as it is; no reader learns an id of an entry
// it may not see.
func TestMemoryHiddenByProvenance(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	for _, name := range []string{"alpha", "beta"} {
		if _, err := e.admin.CreateAgent(ctx, &api.CreateAgent{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	const text, other = "the build uses make", "the deploy key is kept in vault/ci-7"
	ms := memory.New(e.store, nil)
	var alphaIDs []string
	for _, tx := range []string{text, other} {
		en, err := ms.Write(ctx, &memory.WriteParams{Scope: memory.AgentScope("alpha"), Text: tx, Labels: agent.MemoryLabels{Integrity: memory.Trusted}})
		if err != nil {
			t.Fatal(err)
		}
		alphaIDs = append(alphaIDs, en.ID)
	}
	write := `{"text":"` + text + `"}`
	echo := `{"command":"echo '` + other + `'"}`
	c := &agent.RunCreated{Task: "note how the project builds", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: e.sandbox,
		Principal: "beta", Policy: agent.NewPolicyRef(e.policy), Limits: agent.Limits{MaxSteps: 10}}
	id := e.journalRun(c,
		draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "noting: " + text,
			ToolCalls: []model.ToolCall{{ID: "w1", Name: memory.WriteTool, Arguments: write}, {ID: "b1", Name: "bash", Arguments: echo}}}}),
		draft(t, journal.ToolStarted, &agent.ToolStarted{CallID: "w1", Tool: memory.WriteTool, Arguments: json.RawMessage(write)}))
	mine, err := ms.Write(ctx, &memory.WriteParams{Scope: memory.AgentScope("beta"), Text: text, Labels: agent.MemoryLabels{Integrity: memory.Trusted},
		Source: memory.Source{Run: id, Call: "w1", Agent: "beta"}})
	if err != nil {
		t.Fatal(err)
	}
	more := []journal.Draft{
		draft(t, journal.ToolFinished, &agent.ToolFinished{CallID: "w1", Tool: memory.WriteTool, Result: tool.Result{Content: "kept as [memory:" + mine.ID + "] in agent:beta (trusted, public)"}}),
		draft(t, journal.ToolStarted, &agent.ToolStarted{CallID: "b1", Tool: "bash", Arguments: json.RawMessage(echo)}),
		draft(t, journal.ToolFinished, &agent.ToolFinished{CallID: "b1", Tool: "bash", Result: tool.Result{Content: other + "\n"}}),
		draft(t, journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer, Output: "kept: " + text})}
	for i := range more {
		more[i].Time = time.Now()
	}
	if _, err := e.store.Append(ctx, id, 3, more...); err != nil {
		t.Fatal(err)
	}

	// read returns what c reads of the run: its events (verified by the
	// client), and the run's output as listed and shown.
	read := func(c *client.Client) (evs []journal.Event, all string) {
		t.Helper()
		var b strings.Builder
		for ev, err := range c.Events(ctx, id, &client.EventsParams{NoFollow: true}) {
			if err != nil {
				t.Fatalf("events: %v", err)
			}
			evs = append(evs, ev)
			b.Write(ev.Payload)
		}
		r, err := c.Run(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		runs, err := c.Runs(ctx, nil)
		if err != nil || len(runs) != 1 {
			t.Fatalf("runs = %v, %v", runs, err)
		}
		b.WriteString(r.Output + "\n" + runs[0].Output)
		return evs, b.String()
	}
	noIDs := func(who, all string, ids ...string) {
		t.Helper()
		for _, x := range ids {
			if strings.Contains(all, x) {
				t.Errorf("%s reads the id %s of an entry it may not see:\n%s", who, x, all)
			}
		}
	}

	evs, all := read(e.bound("bt", []string{"beta"}, api.ScopeRunsRead))
	for _, ev := range evs {
		if ev.Redacted {
			t.Errorf("beta's token reads event %d (%s) of beta's run redacted: %s", ev.Seq, ev.Type, ev.Payload)
		}
	}
	if strings.Count(all, text) < 5 || !strings.Contains(all, other) || !strings.Contains(all, mine.ID) || strings.Contains(all, "not yours to see") {
		t.Errorf("beta's token does not read beta's run whole:\n%s", all)
	}
	noIDs("beta's token", all, alphaIDs...)

	evs, all = read(e.client(e.newToken("ro", nil, api.ScopeRunsRead)))
	if strings.Contains(all, text) || !strings.Contains(all, "[memory entry: not yours to see]") || !strings.Contains(all, "[memory:hidden] in agent:beta") {
		t.Errorf("a token that may not see agent:beta reads beta's memory:\n%s", all)
	}
	if !strings.Contains(all, "echo '"+other+"'") || !strings.Contains(all, other+"\\n") {
		t.Errorf("a text no memory of the run holds is hidden (an oracle for alpha's entry):\n%s", all)
	}
	noIDs("a token that may not see agent:beta", all, append(alphaIDs, mine.ID)...)
	var marked []int64
	for _, ev := range evs {
		if ev.Redacted {
			marked = append(marked, ev.Seq)
		}
	}
	if want := []int64{2, 3, 4, 7}; !slices.Equal(marked, want) {
		t.Errorf("events marked redacted: %v, want %v (those whose payload changed)", marked, want)
	}
}
