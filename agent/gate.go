package agent

import (
	"context"
	"fmt"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// gate validates each call and asks the policy, journaling one
// gate.decided per call in one atomic append.
func (x *executor) gate(ctx context.Context, ids []string) error {
	types := make([]journal.Type, 0, len(ids))
	payloads := make([]any, 0, len(ids))
	for _, id := range ids {
		c := x.st.call(id)
		types = append(types, journal.GateDecided)
		payloads = append(payloads, x.decide(ctx, c))
	}
	return x.appendMany(ctx, types, payloads)
}

func (x *executor) decide(ctx context.Context, c *Call) *GateDecided {
	d := &GateDecided{CallID: c.ID, Tool: c.Name}
	if x.toolInfo(c.Name) == nil && x.p.Tools.Tool(c.Name) != nil {
		// Offered now but not when the run was created: refuse, the model
		// was never told about it.
		d.Decision = policy.Decision{Effect: policy.Deny, Policies: []string{PolicyValidate}, Reason: fmt.Sprintf("unknown tool %q", c.Name)}
		return d
	}
	args, res := x.p.Tools.Validate(c.ToolCall)
	if res != nil {
		d.Decision = policy.Decision{Effect: policy.Deny, Policies: []string{PolicyValidate}, Reason: res.Content}
		return d
	}
	t := x.p.Tools.Tool(c.Name)
	if t.Scope != nil {
		for _, raw := range t.Scope(args) {
			var rel string
			var err error
			if t.Effect == tool.ReadOnly {
				rel, err = x.p.Env.Workspace.Resolve(raw)
			} else {
				rel, err = x.p.Env.Workspace.ResolveWrite(raw)
			}
			if err != nil {
				d.Decision = policy.Decision{Effect: policy.Deny, Policies: []string{"keel.workspace"}, Reason: err.Error()}
				return d
			}
			d.Paths = append(d.Paths, rel)
		}
	}
	d.Decision = x.p.Policy(ctx, &policy.Call{
		RunID: x.runID, CallID: c.ID, Principal: x.st.Created.Principal, OnBehalfOf: x.st.Created.OnBehalfOf,
		Tool: c.Name, Effect: t.Effect.String(), Arguments: args, Paths: d.Paths,
	})
	return d
}

func (x *executor) reject(ctx context.Context, ids []string) error {
	types := make([]journal.Type, 0, len(ids))
	payloads := make([]any, 0, len(ids))
	for _, id := range ids {
		c := x.st.call(id)
		msg := c.Decision.Reason
		switch {
		case c.Decision.Invalid():
		case c.Resolved != nil && c.Resolved.Decision != policy.Allow:
			msg = "a person denied this call"
			if c.Resolved.Reason != "" {
				msg += ": " + c.Resolved.Reason
			}
		default:
			msg = "the policy denied this call: " + msg
		}
		types = append(types, journal.ToolFinished)
		payloads = append(payloads, &ToolFinished{CallID: id, Tool: c.Name, Synthetic: true, Result: tool.Result{IsError: true, Content: msg}})
	}
	return x.appendMany(ctx, types, payloads)
}

func (x *executor) ask(ctx context.Context, ids []string) error {
	types := make([]journal.Type, 0, len(ids))
	payloads := make([]any, 0, len(ids))
	for _, id := range ids {
		c := x.st.call(id)
		args, _ := x.p.Tools.Validate(c.ToolCall)
		types = append(types, journal.ApprovalRequested)
		payloads = append(payloads, &ApprovalRequested{CallID: id, Tool: c.Name, Arguments: args, Reason: c.Decision.Reason})
	}
	return x.appendMany(ctx, types, payloads)
}
