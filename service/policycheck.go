package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
)

// CheckPolicy decides the call req describes by the service's policy, as
// the gate of a run on this server would decide it before any grant
// (keel --server URL policy check, POST /v1/policy/check). Nothing runs.
// A sandbox req does not name is the server's.
func (s *Service) CheckPolicy(ctx context.Context, _ *Caller, req *api.PolicyCheck) (*api.PolicyDecision, error) {
	c := *req
	c.Sandbox = cmp.Or(c.Sandbox, s.sandboxKind())
	return DecideCall(ctx, s.opts.Policy, &c)
}

// DecideCall decides the call req describes by policy e (keel policy
// check, locally and through [Service.CheckPolicy]): the tool "" is
// bash, the agent "" the local agent, the sandbox "" linux and the mount
// path "" /workspace.
func DecideCall(ctx context.Context, e *policy.Engine, req *api.PolicyCheck) (*api.PolicyDecision, error) {
	var obj map[string]any
	if err := json.Unmarshal(req.Arguments, &obj); err != nil || obj == nil {
		if err == nil {
			err = errNotObject
		}
		return nil, badRequest("arguments: not a JSON object: %v", err)
	}
	c := policy.Case{Tool: cmp.Or(req.Tool, "bash"), Args: req.Arguments, Paths: req.Paths, Principal: cmp.Or(req.Agent, identity.LocalAgent),
		OnBehalfOf: req.OnBehalfOf, Network: req.Network, Sandbox: cmp.Or(req.Sandbox, "linux"), Mount: cmp.Or(req.MountPath, "/workspace"),
		Workspace: req.Workspace, Holds: req.SecretEnv, Untrusted: req.Untrusted, Unattended: req.Unattended}
	return &api.PolicyDecision{Policy: e.Name(), SHA256: e.Hash(), Rules: e.Len(), Decision: e.Decide(ctx, c.Call())}, nil
}

// errNotObject is the error of arguments that are JSON but no object.
var errNotObject = errors.New("want an object")
