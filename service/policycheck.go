package service

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/memory"
	"github.com/keel-run/keel/skill"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
)

// CheckPolicy decides the call req describes by the service's policy, as
// the gate of a run on this server would decide it before any grant
// (keel --server URL policy check, POST /v1/policy/check). Nothing runs.
// A sandbox req does not name is the server's. A call no run could make
// (see CheckCall) is refused as a creation refuses it.
func (s *Service) CheckPolicy(ctx context.Context, _ *Caller, req *api.PolicyCheck) (*api.PolicyDecision, error) {
	c := *req
	c.Sandbox = cmp.Or(c.Sandbox, s.sandboxKind())
	if err := CheckCall(ctx, s.opts.Directory, &c); err != nil {
		return nil, err
	}
	return DecideCall(ctx, s.opts.Policy, &c)
}

// CheckCall refuses the call req describes when no run could make it, in
// the words a run's creation uses: arguments that are not a JSON object,
// a tool Keel does not have, a sandbox or mount path a run may not have,
// and, with dir (nil: not checked), an agent that cannot run for the
// person named (unknown, revoked, an employee acting for someone, an
// assistant for nobody). The defaults are DecideCall's.
func CheckCall(ctx context.Context, dir *identity.Directory, req *api.PolicyCheck) error {
	if a := bytes.TrimSpace(req.Arguments); len(a) == 0 || string(a) == "null" {
		return badRequest(`arguments: missing: give the call's arguments, a JSON object (for bash {"command": "ls"})`)
	}
	var obj map[string]any
	if err := json.Unmarshal(req.Arguments, &obj); err != nil || obj == nil {
		if err == nil {
			err = errNotObject
		}
		return badRequest("arguments: not a JSON object: %v", err)
	}
	if name := cmp.Or(req.Tool, "bash"); !knownTool(name) {
		return badRequest("tool %q: Keel has no such tool: want one of %s, or SERVER__TOOL for a connector's", name, strings.Join(keelTools(), ", "))
	}
	if err := checkSandboxMount(cmp.Or(req.Sandbox, "linux"), req.MountPath); err != nil {
		return err
	}
	if dir != nil {
		if err := checkAgent(ctx, dir, cmp.Or(req.Agent, identity.LocalAgent), req.OnBehalfOf); err != nil {
			return err
		}
	}
	return nil
}

// builtinTools are Keel's built-in tools, retired ones included (a
// run made before they were retired still calls them).
var builtinTools = sync.OnceValue(func() *tool.Registry {
	r := tool.NewRegistry()
	builtin.Register(r, nil)
	return r
})

// keelTools returns the names of the tools Keel offers new runs,
// sorted: the built-in ones, the team's, memory's and skills'.
var keelTools = sync.OnceValue(func() []string {
	names := append(builtinTools().Names(), agent.SpawnTool, agent.WaitTool, agent.HandoffTool, memory.SearchTool, memory.WriteTool,
		skill.UseTool, skill.ProposeTool, skill.PromoteTool)
	slices.Sort(names)
	return slices.Compact(names)
})

// knownTool reports whether a run could call a tool named name: one of
// Keel's own, or a connector's (SERVER__TOOL, known once its server is
// reached).
func knownTool(name string) bool {
	if srv, t, ok := strings.Cut(name, "__"); ok && srv != "" && t != "" {
		return true
	}
	return builtinTools().Tool(name) != nil || slices.Contains(keelTools(), name)
}

// DecideCall decides the call req describes by policy e (keel policy
// check, locally and through [Service.CheckPolicy]): the tool "" is
// bash, the agent "" the local agent, the sandbox "" linux and the mount
// path "" /workspace. Check it with [CheckCall] first.
func DecideCall(ctx context.Context, e *policy.Engine, req *api.PolicyCheck) (*api.PolicyDecision, error) {
	if err := CheckCall(ctx, nil, req); err != nil {
		return nil, err
	}
	c := policy.Case{Tool: cmp.Or(req.Tool, "bash"), Args: req.Arguments, Paths: req.Paths, Principal: cmp.Or(req.Agent, identity.LocalAgent),
		OnBehalfOf: req.OnBehalfOf, Network: req.Network, Sandbox: cmp.Or(req.Sandbox, "linux"), Mount: cmp.Or(req.MountPath, "/workspace"),
		Workspace: req.Workspace, Holds: req.SecretEnv, Untrusted: req.Untrusted, Unattended: req.Unattended}
	return &api.PolicyDecision{Policy: e.Name(), SHA256: e.Hash(), Rules: e.Len(), Decision: e.Decide(ctx, c.Call())}, nil
}

// errNotObject is the error of arguments that are JSON but no object.
var errNotObject = errors.New("want an object")
