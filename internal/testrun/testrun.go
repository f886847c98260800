// Package testrun makes runs in the states tests of several packages
// need, on a real runtime over the journal they are given: a run of the
// keel-cli agent that waits for a person's approval of one call.
package testrun

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// AskRm is the policy of a Paused run: it asks a person before any rm;
// everything else is allowed in the workspace.
const AskRm = `
@id("all") permit(principal, action, resource);
@id("rm") @ask @reason("deleting files needs a person")
forbid(principal, action, resource) when { resource has name && resource.name == "rm" };
@id("outside") forbid(principal, action, resource) when { context.outside };
`

// Paused creates in store a run of the keel-cli agent that asks for
// approval of its call c1, the bash command cmd, at the time clock gives
// (nil: the runtime's clock), with a deadline of timeout (0: none), and
// returns its id. The call never runs: a test that lets it run fails.
func Paused(t testing.TB, store journal.Store, clock func() time.Time, cmd string, timeout time.Duration) string {
	t.Helper()
	return paused(t, store, clock, timeout, cmd)
}

// PausedCalls is [Paused] with a call for each of cmds, all asked in
// one step: c1, c2 and so on, each waiting for a person's approval.
func PausedCalls(t testing.TB, store journal.Store, cmds ...string) string {
	t.Helper()
	return paused(t, store, nil, 0, cmds...)
}

func paused(t testing.TB, store journal.Store, clock func() time.Time, timeout time.Duration, cmds ...string) string {
	t.Helper()
	rt := agent.NewRuntime(store, &agent.RuntimeOptions{Clock: clock})
	reg := tool.NewRegistry()
	tool.Add(reg, &tool.Tool{Name: "bash", Description: "run", Effect: tool.External}, func(context.Context, *tool.Request, struct {
		Command string `json:"command"`
	}) (*tool.Result, error) {
		t.Error("the call ran")
		return tool.Text("ran"), nil
	})
	var infos []agent.ToolInfo
	for _, sp := range reg.Specs() {
		infos = append(infos, agent.ToolInfo{ToolSpec: sp, Effect: "external"})
	}
	pol, err := policy.Parse("ask.cedar", []byte(AskRm))
	if err != nil {
		t.Fatal(err)
	}
	rc := &agent.RunCreated{Task: "clean\tup " + strings.Join(cmds, "; "), Tools: infos, Workspace: t.TempDir(), MountPath: "/workspace", Principal: identity.LocalAgent,
		Policy: agent.NewPolicyRef(pol)}
	if timeout > 0 {
		rc.Approval = &agent.ApprovalSettings{Timeout: agent.Duration(timeout)}
	}
	id, err := rt.Create(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tool.NewWorkspace(rc.Workspace, "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var calls []model.ToolCall
	for i, cmd := range cmds {
		calls = append(calls, modeltest.Call(fmt.Sprintf("c%d", i+1), "bash", map[string]string{"command": cmd}))
	}
	m := modeltest.NewScripted([]modeltest.Turn{modeltest.Calls("", calls...)}, nil)
	out, err := rt.Execute(context.Background(), id, &agent.ExecParams{Wiring: agent.Wiring{Model: m, Tools: reg, Env: &tool.Env{Workspace: w}}})
	if err != nil || out.Status != journal.StatusPaused || len(out.State.Pending()) != len(cmds) {
		t.Fatalf("Execute = %+v %v", out, err)
	}
	return id
}
