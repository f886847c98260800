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
	"github.com/keel-run/keel/model"
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
// (see CheckCall) is refused as a creation refuses it, and so is a
// workspace the caller's run could not have (the server's workspace
// roots): file tools' paths are resolved in it, as a run resolves them.
func (s *Service) CheckPolicy(ctx context.Context, who *Caller, req *api.PolicyCheck) (*api.PolicyDecision, error) {
	c := *req
	c.Sandbox = cmp.Or(c.Sandbox, s.sandboxKind())
	if err := CheckCall(ctx, s.opts.Directory, &c); err != nil {
		return nil, err
	}
	if c.Workspace != "" {
		real, err := s.conf.checkWorkspace(c.Workspace, who == nil || !who.Local)
		if err != nil {
			return nil, err
		}
		c.Workspace = real
	}
	return DecideCall(ctx, s.opts.Policy, &c)
}

// CheckCall refuses the call req describes when no run could make it, in
// the words a run's creation uses: arguments that are not a JSON object,
// a tool Keel does not have, arguments a run's gate refuses as invalid
// for one of Keel's built-in tools (its [tool.Registry.Validate]: keys
// its schema does not have, a duplicate key, a wrong type; in the words
// of the error result the model would get), a sandbox or mount path a
// run may not have,
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
	if _, _, err := validArgs(req); err != nil {
		return err
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

// validArgs validates req's arguments as a run's gate does when its tool
// is one of Keel's built-in ones, and returns them as the gate passes
// them on (compact) with the tool. For the others (the team's, memory's
// and skills' tools, a connector's), whose schema a check does not have
// at hand, it returns the arguments as they are and no tool.
func validArgs(req *api.PolicyCheck) (json.RawMessage, *tool.Tool, error) {
	name := cmp.Or(req.Tool, "bash")
	reg := builtinTools()
	t := reg.Tool(name)
	if t == nil {
		return req.Arguments, nil, nil
	}
	args, res := reg.Validate(model.ToolCall{Name: name, Arguments: string(req.Arguments)})
	if res != nil {
		return nil, nil, badRequest("%s", res.Content)
	}
	return args, t, nil
}

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
//
// As a run's gate, it first resolves the paths a built-in file tool
// touches (the arguments', or req.Paths) in the run's workspace
// ([tool.Workspace.ResolveCall]): a path the workspace refuses (outside
// it, protected, hidden by e's [paths]) is denied with policy id
// [agent.PolicyWorkspace] and the workspace's reason, and e decides the
// resolved paths only.
func DecideCall(ctx context.Context, e *policy.Engine, req *api.PolicyCheck) (*api.PolicyDecision, error) {
	if err := CheckCall(ctx, nil, req); err != nil {
		return nil, err
	}
	args, t, err := validArgs(req)
	if err != nil {
		return nil, err
	}
	mount := cmp.Or(req.MountPath, "/workspace")
	paths := req.Paths
	if t != nil && t.Scope != nil {
		raw := req.Paths
		if len(raw) == 0 {
			raw = t.Scope(args)
		}
		ws, err := checkWorkspace(req.Workspace, mount)
		if err != nil {
			return nil, err
		}
		defer ws.Close()
		ws.Hide(e.DeniedPaths())
		if paths, err = ws.ResolveCall(t.Effect, raw); err != nil {
			d := policy.Decision{Effect: policy.Deny, Policies: []string{agent.PolicyWorkspace}, Reason: err.Error()}
			return &api.PolicyDecision{Policy: e.Name(), SHA256: e.Hash(), Rules: e.Len(), Decision: d}, nil
		}
	}
	c := policy.Case{Tool: cmp.Or(req.Tool, "bash"), Args: args, Paths: paths, Principal: cmp.Or(req.Agent, identity.LocalAgent),
		OnBehalfOf: req.OnBehalfOf, Network: req.Network, Sandbox: cmp.Or(req.Sandbox, "linux"), Mount: mount,
		Workspace: req.Workspace, Holds: req.SecretEnv, Untrusted: req.Untrusted, Unattended: req.Unattended}
	return &api.PolicyDecision{Policy: e.Name(), SHA256: e.Hash(), Rules: e.Len(), Decision: e.Decide(ctx, c.Call())}, nil
}

// checkWorkspace returns the workspace a checked call's file tool paths
// are resolved in. Given the run's directory (dir, --workspace), it is
// opened as a run opens it, so symbolic links in it lead where they lead
// in the run. Without one (a check names none as a rule, and neither the
// current directory nor a host /workspace is the run's), the paths are
// resolved by their text against the mount path
// ([tool.NewLexicalWorkspace]): everything a workspace refuses whatever
// it holds is refused as a run refuses it (an absolute path outside the
// mount path, a ".." out of it, .git and .keel/ written, the policy's
// denied paths), and only what the run's directory holds is not known
// (a link in it, which leads elsewhere; a directory a ".." follows that
// is not there, which a run refuses).
func checkWorkspace(dir, mount string) (*tool.Workspace, error) {
	if dir == "" {
		ws, err := tool.NewLexicalWorkspace(mount, nil)
		if err != nil {
			return nil, badRequest("%v", err)
		}
		return ws, nil
	}
	ws, err := tool.NewWorkspace(dir, mount, nil)
	if err != nil {
		return nil, badRequest("workspace %s is not a directory: give the run's workspace directory, or no --workspace", dir)
	}
	return ws, nil
}

// errNotObject is the error of arguments that are JSON but no object.
var errNotObject = errors.New("want an object")
