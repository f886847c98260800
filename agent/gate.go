package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// PolicyRef is the policy a run is decided by, fixed in run.created so
// that a resumed or replayed run decides by the same rules whatever the
// policy file says later.
type PolicyRef struct {
	// Name is where the policy came from: a file path as given, or
	// policy.DefaultName for the built-in default.
	Name string `json:"name"`
	// SHA256 is the hex SHA-256 of Source.
	SHA256 string `json:"sha256"`
	// Source is the policy file's content (TOML, or Cedar when Name ends
	// in ".cedar").
	Source string `json:"source"`
}

// NewPolicyRef returns the reference to record in [RunCreated].Policy for
// a compiled policy.
func NewPolicyRef(e *policy.Engine) *PolicyRef {
	return &PolicyRef{Name: e.Name(), SHA256: e.Hash(), Source: string(e.Source())}
}

// ErrPolicy is wrapped by the error of an execution whose journaled policy
// cannot be used: it does not compile, or its hash does not match.
var ErrPolicy = errors.New("agent: the run's policy cannot be used")

// RunPolicy compiles the policy recorded in c (what [Runtime.Execute]
// decides by), checking its hash. It returns nil and no error when c
// records no policy: the execution then uses [ExecParams].Policy.
//
// Engines are kept in a small process-wide cache keyed by the policy's
// name and its source, so that every execution of a run (every step on a
// cluster worker) does not parse the same source again; an Engine is
// immutable after [policy.Parse], and the same one serves concurrent
// executions. The recorded hash is checked on every call, against the
// SHA-256 of the very source the engine was parsed from.
func RunPolicy(c *RunCreated) (*policy.Engine, error) {
	if c.Policy == nil {
		return nil, nil
	}
	// The key holds the source itself rather than its SHA-256: a hit is
	// the same bytes, and the lookup costs a map hash of the source
	// (about 2µs for the 13 KB default policy), where a SHA-256 and a
	// copy to bytes cost 30-70µs on every call.
	key := engineKey{name: c.Policy.Name, source: c.Policy.Source}
	e, ok := engines.Get(key)
	if !ok {
		var err error
		e, err = policy.Parse(c.Policy.Name, []byte(c.Policy.Source))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
		}
		engines.Add(engineKey{name: strings.Clone(key.name), source: strings.Clone(key.source)}, e)
	}
	if c.Policy.SHA256 != "" && e.Hash() != c.Policy.SHA256 {
		return nil, fmt.Errorf("%w: its source does not match its recorded hash", ErrPolicy)
	}
	return e, nil
}

// engineKey identifies a compiled policy: the name decides the format
// (a name ending in .cedar is bare Cedar) and is the engine's Name.
type engineKey struct{ name, source string }

// engineCacheSize bounds the cache of [RunPolicy]: the distinct policies
// of the runs a process executes at a time are few (the default, a
// team's files), and one that falls out is parsed again.
const engineCacheSize = 64

// engines are the compiled policies of [RunPolicy], least recently used
// evicted first.
var engines = func() *lru.Cache[engineKey, *policy.Engine] {
	c, err := lru.New[engineKey, *policy.Engine](engineCacheSize)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return c
}()

// DeniedPaths returns the workspace paths the run's policy denies ([paths]
// deny; none for a run without a policy of its own): the file tools treat
// them as absent (tool.Workspace.Hide), the sandbox masks them, and
// nothing that shows the workspace to a person (diffs, approval previews)
// shows their content.
func DeniedPaths(c *RunCreated) ([]string, error) {
	e, err := RunPolicy(c)
	if err != nil || e == nil {
		return nil, err
	}
	return e.DeniedPaths(), nil
}

// gateState is what one execution keeps for its gate.
type gateState struct {
	compiled bool
	decide   policy.Policy
	// grants are the principal's standing approvals, as returned by the
	// newest principal check.
	grants []policy.Grant
}

// policy returns the policy the execution decides by: the run's own,
// compiled once, or ExecParams.Policy for runs created without one.
func (x *executor) policy() (policy.Policy, error) {
	if !x.gs.compiled {
		e, err := RunPolicy(x.st.Created)
		if err != nil {
			return nil, fmt.Errorf("agent: run %s: %w", x.runID, err)
		}
		x.gs.decide = x.p.Policy
		if e != nil {
			x.gs.decide = e.Decide
		}
		x.gs.compiled = true
	}
	return x.gs.decide, nil
}

// checkPrincipal runs the principal check before an action that decides
// or runs tools. It returns true when the run was paused because the
// principal may not act (revoked or unknown): no tool runs, and every
// call keeps waiting for a decision it gets when the run resumes or ends.
func (x *executor) checkPrincipal(ctx context.Context, a Action) (bool, error) {
	if x.p.Principals == nil {
		return false, nil
	}
	switch a.Kind {
	case ActGate, ActRunTools, ActRecover:
	default:
		return false, nil
	}
	c := x.st.Created
	grants, err := x.p.Principals(ctx, c.Principal, c.OnBehalfOf)
	if err == nil {
		x.gs.grants = grants
		return false, nil
	}
	if !errors.Is(err, policy.ErrRevoked) {
		return false, fmt.Errorf("agent: run %s: check principal %q: %w", x.runID, c.Principal, err)
	}
	msg := fmt.Sprintf("agent %q may no longer act: %v", c.Principal, err)
	if err := x.append(ctx, journal.RunPaused, &RunEnded{Reason: ReasonRevoked, Message: msg}); err != nil {
		return false, err
	}
	return true, nil
}

// mayRun re-checks the principal right before a tool starts, so that a
// revocation also stops the calls of a turn that were decided before it.
// A call that may not run is left unstarted: the next step pauses the run
// (checkPrincipal), reports the check's error, or records the stop that
// made the check fail.
func (x *executor) mayRun(ctx context.Context) bool {
	if x.p.Principals == nil {
		return true
	}
	c := x.st.Created
	_, err := x.p.Principals(ctx, c.Principal, c.OnBehalfOf)
	return err == nil
}

// gate validates each call and asks the policy, journaling one
// gate.decided per call in one atomic append.
func (x *executor) gate(ctx context.Context, ids []string) error {
	decide, err := x.policy()
	if err != nil {
		return err
	}
	x.mu.Lock()
	x.valid = make(map[string]validArgs, len(ids))
	x.mu.Unlock()
	types := make([]journal.Type, 0, len(ids))
	payloads := make([]any, 0, len(ids))
	for _, id := range ids {
		c := x.st.call(id)
		types = append(types, journal.GateDecided)
		payloads = append(payloads, boundDecided(x.decide(ctx, decide, c)))
	}
	return x.appendMany(ctx, types, payloads)
}

func (x *executor) decide(ctx context.Context, decide policy.Policy, c *Call) *GateDecided {
	d := &GateDecided{CallID: c.ID, Tool: c.Name}
	reg := x.registry(c.Name)
	if x.toolInfo(c.Name) == nil && reg.Tool(c.Name) != nil {
		// Offered now but not when the run was created: refuse, the model
		// was never told about it.
		d.Decision = policy.Decision{Effect: policy.Deny, Policies: []string{PolicyValidate}, Reason: fmt.Sprintf("unknown tool %q", c.Name)}
		return d
	}
	args, res := reg.Validate(x.secrets.unseal(c.ToolCall))
	if res != nil {
		d.Decision = policy.Decision{Effect: policy.Deny, Policies: []string{PolicyValidate}, Reason: res.Content}
		return d
	}
	x.mu.Lock()
	x.valid[c.ID] = validArgs{name: c.Name, raw: c.Arguments, args: args}
	x.mu.Unlock()
	t := reg.Tool(c.Name)
	if t.Scope != nil {
		var err error
		if d.Paths, err = x.p.Env.Workspace.ResolveCall(t.Effect, t.Scope(args)); err != nil {
			d.Decision = policy.Decision{Effect: policy.Deny, Policies: []string{PolicyWorkspace}, Reason: err.Error()}
			return d
		}
	}
	deny, teamFacts := x.teamDecide(c.ID, c.Name, args, d.Paths, t.Effect, t.Scope != nil)
	if deny != nil {
		d.Decision = *deny
		return d
	}
	cr := x.st.Created
	grants := append(append([]policy.Grant(nil), x.st.Grants...), x.gs.grants...)
	if t.Credential != nil {
		d.Credential = t.Credential(ctx, &tool.Request{RunID: x.runID, CallID: c.ID, Arguments: args, Principal: cr.Principal, OnBehalfOf: cr.OnBehalfOf, MaxScopes: scopeBound(cr), Env: x.p.Env})
	}
	if d.Credential != nil {
		u, deny := boundUse(d.Credential, scopeBound(cr))
		if deny != nil {
			d.Decision = *deny
			return d
		}
		d.Credential = u
	}
	var actors []string
	if cr.Parent != nil {
		actors = cr.Parent.Actors
	}
	d.Decision = decideAs(ctx, decide, &policy.Call{
		RunID: x.runID, CallID: c.ID, Principal: cr.Principal, OnBehalfOf: cr.OnBehalfOf, Actors: actors,
		Tool: c.Name, Effect: t.Effect.String(), Arguments: args, Paths: d.Paths,
		Workspace: cr.Workspace, MountPath: cr.MountPath, Sandbox: cr.Sandbox, Network: cr.Network, Grants: grants, ReadOnly: stateReadOnly(cr),
		Credential: d.Credential,
		Server:     t.Server, Facts: facts(t, args, teamFacts), Flow: x.callFlow(c.Name, args),
		Autorun: mcpFiles(cr),
	})
	if t.Hold != nil && d.Decision.Effect != policy.Deny {
		// A tool whose definition changed since it was pinned waits for
		// a person, whatever the policy allows (grants included).
		if why := t.Hold(); why != "" {
			prev := d.Decision
			d.Decision = policy.Decision{Effect: policy.Ask, Policies: []string{PolicyPin}, Reason: why}
			if prev.Effect == policy.Ask {
				// The policy asked too: the person sees both reasons
				// (what flows, for one) and the parts that asked.
				d.Decision.Policies = append(d.Decision.Policies, prev.Policies...)
				d.Decision.Reason += "; and " + prev.Reason
				d.Decision.Parts = prev.Parts
			}
		}
	}
	if d.Decision.Effect == policy.Ask && t.Check != nil {
		// A call that cannot succeed is no question for a person: it
		// fails now, with the tool's own error.
		if why := t.Check(&tool.Request{RunID: x.runID, CallID: c.ID, Arguments: args, Env: x.p.Env}); why != "" {
			d.Decision = policy.Decision{Effect: policy.Deny, Policies: []string{PolicyCheck}, Reason: why}
		}
	}
	return d
}

// mcpFiles are the workspace files the run's stdio MCP servers run:
// the arguments of their commands that name a path under the mount
// (absolute, or relative to the workspace, where a server starts), and
// the modules such a script may import from where it is: Python puts
// the script's directory first on its import path (json.py beside
// server.py is the json module the server imports), Node resolves
// relative imports there and packages in node_modules of it and every
// directory above. A run that rewrites one changes code the next run
// starts with its secrets before any call is decided. The modules are
// patterns "DIR/**/GLOB" ([policy.Call].Autorun).
func mcpFiles(cr *RunCreated) []string {
	mount := cr.MountPath
	if mount == "" {
		mount = "/workspace"
	}
	mount = path.Clean(mount)
	var out []string
	add := func(p string) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, s := range cr.MCP {
		for _, a := range s.Command {
			if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
				a = v
			}
			if !strings.Contains(a, "/") && !strings.Contains(path.Base(a), ".") {
				continue // a program name or an option
			}
			p := a
			if !path.IsAbs(p) {
				p = path.Join(mount, p)
			}
			p = path.Clean(p)
			if !strings.HasPrefix(p, mount+"/") {
				continue
			}
			add(p)
			dir := path.Dir(p)
			switch path.Ext(p) {
			case ".py":
				// Modules, compiled modules (a .pyc runs without its
				// source) and extension modules, also in packages.
				for _, g := range []string{"*.py", "*.pyc", "*.so"} {
					add(dir + "/**/" + g)
				}
			case ".js", ".mjs", ".cjs", ".ts", ".mts", ".cts":
				for _, g := range []string{"*.js", "*.mjs", "*.cjs", "*.ts", "*.mts", "*.cts", "*.json", "*.node"} {
					add(dir + "/**/" + g)
				}
				for d := dir; ; d = path.Dir(d) {
					add(d + "/node_modules/**/*")
					add(d + "/package.json")
					if d == mount || !strings.HasPrefix(d, mount+"/") {
						break
					}
				}
			}
		}
	}
	return out
}

// decideAs decides call as its principal and then as each principal it
// acts for (a child agent's parent, and its parent...): the strictest
// decision stands, so that a child may do at most what each of them may
// (a rule about its parent's principal binds the child too).
func decideAs(ctx context.Context, decide policy.Policy, call *policy.Call) policy.Decision {
	d := decide(ctx, call)
	for i, a := range call.Actors {
		if d.Effect == policy.Deny {
			break
		}
		as := *call
		as.Principal, as.Actors = a, call.Actors[i+1:]
		ad := decide(ctx, &as)
		if strictness(ad.Effect) > strictness(d.Effect) {
			ad.Reason = fmt.Sprintf("as %s, which this agent acts for: %s", a, ad.Reason)
			d = ad
		}
	}
	return d
}

func strictness(e policy.Effect) int {
	switch e {
	case policy.Allow:
		return 0
	case policy.Ask:
		return 1
	}
	return 2
}

// boundUse narrows the credential a call would use to the run's bound
// (a child agent's, [ParentLink].Scopes), as the vault will, or returns
// a denial when nothing of it is left.
func boundUse(u *policy.CredentialUse, bound map[string][]string) (*policy.CredentialUse, *policy.Decision) {
	s, ok := bound[u.Provider]
	if !ok {
		return u, nil
	}
	eff := s
	if len(u.Scopes) > 0 {
		eff = intersect(s, u.Scopes)
	}
	if len(eff) == 0 {
		why := fmt.Sprintf("this agent may use no credential of provider %s", u.Provider)
		if len(s) > 0 {
			why = fmt.Sprintf("this agent's credentials of provider %s carry at most scopes %s, and the call's scopes %s are none of them", u.Provider, strings.Join(s, " "), strings.Join(u.Scopes, " "))
		}
		return nil, &policy.Decision{Effect: policy.Deny, Policies: []string{PolicyTeam}, Reason: why}
	}
	n := *u
	n.Scopes = eff
	return &n, nil
}

// PolicyPin is the policy id of a call held because its tool's
// definition changed since it was pinned (an MCP server's tool).
const PolicyPin = "keel.pin"

func facts(t *tool.Tool, args json.RawMessage, team map[string]any) map[string]any {
	if team != nil {
		return team
	}
	if t.Facts == nil {
		return nil
	}
	return t.Facts(args)
}

func (x *executor) reject(ctx context.Context, ids []string) error {
	types := make([]journal.Type, 0, len(ids))
	payloads := make([]any, 0, len(ids))
	for _, id := range ids {
		c := x.st.call(id)
		msg := c.Decision.Reason
		switch {
		case c.Decision.Invalid(), c.Decision.Checked():
		case c.authDeclined():
			msg = fmt.Sprintf("the authorization this call needs (provider %s) was declined", c.Auth.Provider)
			if c.AuthResolved.Reason != "" {
				msg += ": " + c.AuthResolved.Reason
			}
		case c.Resolved != nil && c.Resolved.Decision != policy.Allow:
			msg = "a person denied this call"
			if c.Resolved.By == ByTimeout {
				msg = "nobody approved this call in time, so it was denied"
			}
			if c.Resolved.Reason != "" {
				msg += ": " + c.Resolved.Reason
			}
		default:
			msg = "the policy denied this call: " + msg
		}
		// Bounded like every result (a person's reason, a policy's).
		r := tool.Result{IsError: true, Content: msg}
		x.boundResult(&r, id)
		types = append(types, journal.ToolFinished)
		payloads = append(payloads, &ToolFinished{CallID: id, Tool: c.Name, Synthetic: true, Result: r})
	}
	return x.appendMany(ctx, types, payloads)
}

// ask journals approval.requested for each call, with the exact action
// shown raw, the parts that asked, and the deadline and default decision
// of the run's approval settings.
func (x *executor) ask(ctx context.Context, ids []string) error {
	types := make([]journal.Type, 0, len(ids))
	payloads := make([]any, 0, len(ids))
	set := x.st.Created.Approval
	for _, id := range ids {
		c := x.st.call(id)
		// Validated with the secrets' values, as decided: the payload is
		// sealed when it is journaled.
		args, _ := x.registry(c.Name).Validate(x.secrets.unseal(c.ToolCall))
		r := &ApprovalRequested{CallID: id, Tool: c.Name, Arguments: args, Reason: c.Decision.Reason, Action: rawAction(c.Name, args)}
		if t := x.p.Tools.Tool(c.Name); t != nil && t.State != nil && args != nil {
			r.State = t.State(&tool.Request{RunID: x.runID, CallID: id, Arguments: args, Env: x.p.Env})
		} else if t != nil && t.Effect != tool.ReadOnly {
			r.State = x.writtenState(c)
		}
		// Arguments and action sealed as the model's text (a placeholder
		// it typed shown marked); the parts and the reason are the
		// decision's, sealed already.
		if x.secrets != nil {
			if args != nil {
				r.Arguments = x.secrets.sealFresh(args)
			}
			var a string
			if json.Unmarshal(x.secrets.sealFresh(marshal(r.Action)), &a) == nil {
				r.Action = a
			}
		}
		for _, p := range c.Decision.Parts {
			if p.Effect == policy.Ask {
				r.Parts = append(r.Parts, p)
			}
		}
		if set != nil && set.Timeout > 0 {
			exp := x.rt.clock().Add(set.Timeout.D()).UTC()
			r.Expires = &exp
			r.Default = set.DefaultDecision()
		}
		types = append(types, journal.ApprovalRequested)
		payloads = append(payloads, r)
	}
	return x.appendMany(ctx, types, payloads)
}

// rawAction is what a person approves, exactly as the model asked for it:
// the command line of bash, the URL of fetch_url, otherwise the tool's
// name and its whole arguments (a file write shows its content).
func rawAction(toolName string, args json.RawMessage) string {
	var in map[string]any
	if json.Unmarshal(args, &in) == nil {
		key := map[string]string{"bash": "command", "fetch_url": "url"}[toolName]
		if s, ok := in[key].(string); ok && key != "" {
			return s
		}
	}
	return toolName + " " + string(args)
}

// stateReadOnly returns the paths of c's state directory the sandbox shows
// read-only: its whole outputs (see RunCreated.StateDir).
func stateReadOnly(c *RunCreated) []string {
	if c.StateDir == "" {
		return nil
	}
	return []string{path.Join(c.StateDir, tool.StateArtifacts)}
}
