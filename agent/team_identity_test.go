package agent_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// TestChildIdentity: a child acts as an identity of its own below its
// parent's ("lead-bot/investigator"), journaled in its run.created with
// the principals it acts for and its credential bound; its calls are
// decided as itself and as its parent (a rule about the parent binds the
// child, the strictest decision stands), Cedar sees the parent as the
// principal's parent and in context.actors; a credential use beyond its
// bound is narrowed or, with nothing left, denied by the gate.
func TestChildIdentity(t *testing.T) {
	eng, err := policy.Parse("team.cedar", []byte(`
@id("all") permit(principal, action, resource);
@id("lead-no-write") forbid(principal == Keel::Agent::"lead-bot", action == Keel::Action::"write", resource);
@id("children-ask-echo") forbid(principal in Keel::Agent::"lead-bot", action == Keel::Action::"echo", resource)
  when { context.actors.contains("lead-bot") && context.call like "*_ask*" };
`))
	if err != nil {
		t.Fatal(err)
	}
	defs := []agent.AgentDef{{Name: "investigator", Description: "reads", Tools: []string{"echo", "write", "gh"}, Scopes: map[string][]string{"github": {"repo:read", "issues:read"}}}}
	m := &taskModel{turns: map[string][]model.Message{
		"lead": {calls(spawnCall("s", map[string]any{"task": "look", "agent": "investigator"})), answer("ok")},
		"look": {calls(tc("w", "write", `{"path":"a.txt","content":"x"}`), tc("e", "echo", `{"text":"hi"}`), tc("e_ask", "echo", `{"text":"x"}`),
			tc("g1", "gh", `{"scopes":["repo:read","repo:write"]}`), tc("g2", "gh", `{"scopes":["repo:write"]}`)), answer("found it")},
	}}
	e, team := teamEnv(t, m)
	var seen []*tool.Request
	tool.Add(e.reg, &tool.Tool{Name: "gh", Description: "call github", Effect: tool.External,
		Credential: func(ctx context.Context, req *tool.Request) *policy.CredentialUse {
			var in struct{ Scopes []string }
			json.Unmarshal(req.Arguments, &in)
			return &policy.CredentialUse{Provider: "github", Resource: "https://api.github.com/x", Method: "GET", Scopes: in.Scopes}
		}},
		func(ctx context.Context, req *tool.Request, in struct {
			Scopes []string `json:"scopes"`
		}) (*tool.Result, error) {
			seen = append(seen, req)
			return tool.Text("ok"), nil
		})
	c := &agent.RunCreated{Task: "lead", Agents: defs, Principal: "lead-bot", Policy: agent.NewPolicyRef(eng)}
	for _, s := range e.reg.Specs() {
		c.Tools = append(c.Tools, agent.ToolInfo{ToolSpec: s, Effect: e.reg.Tool(s.Name).Effect.String()})
	}
	id := e.createTeam(c)
	p := e.params(m)
	p.Team = team
	out, err := e.rt.Execute(t.Context(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	team.Close()
	if len(out.State.Children) != 1 {
		t.Fatalf("%d children", len(out.State.Children))
	}
	ch, _, err := e.rt.Load(t.Context(), out.State.Children[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	cr := ch.Created
	if cr.Principal != "lead-bot/investigator" || !slices.Equal(cr.Parent.Actors, []string{"lead-bot"}) ||
		!slices.Equal(cr.Parent.Scopes["github"], []string{"repo:read", "issues:read"}) {
		t.Errorf("child principal %q, actors %v, scopes %v", cr.Principal, cr.Parent.Actors, cr.Parent.Scopes)
	}
	got := map[string]string{}
	for _, c := range ch.Turns[0].Calls {
		got[c.ID[:len(c.ID)-2]] = string(c.Decision.Effect) + " " + strings.Join(c.Decision.Policies, ",")
		if c.ID[:2] == "g1" && (c.Decision.Credential == nil || !slices.Equal(c.Decision.Credential.Scopes, []string{"repo:read"})) {
			t.Errorf("g1's credential %+v, want narrowed to repo:read", c.Decision.Credential)
		}
		if c.ID[:1] == "w" && !strings.Contains(c.Decision.Reason, "as lead-bot") {
			t.Errorf("write denied for %q, want the parent's rule named", c.Decision.Reason)
		}
	}
	want := map[string]string{"w": "deny lead-no-write", "e": "allow all", "e_ask": "deny children-ask-echo", "g1": "allow all", "g2": "deny " + agent.PolicyTeam}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("call %s: %s, want %s", k, got[k], v)
		}
	}
	if len(seen) != 1 || seen[0].Principal != "lead-bot/investigator" || !slices.Equal(seen[0].MaxScopes["github"], []string{"repo:read", "issues:read"}) {
		t.Errorf("the tool ran %d times; want once, as the child with its bound", len(seen))
	}
}
