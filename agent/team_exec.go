package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// Launcher starts and follows the child runs of a run (its
// [Wiring].Team). Every method is safe for concurrent use.
type Launcher interface {
	// Start makes sure the child run id exists (journaling c as its
	// run.created unless it has events) and executes until it ends:
	// unless it ended already, or an execution of it is in progress, it
	// starts one that runs on after Start returns. It is called again
	// for the same child after a crash, and must then neither create nor
	// run the child twice. Canceling ctx's execution with a cause stops
	// the child with that cause (the subtree follows its root).
	Start(ctx context.Context, id string, c *RunCreated) error
	// Wait blocks until the run id has ended (completed, failed or
	// canceled; a paused child is waited for) or ctx is done, and
	// returns its folded state.
	Wait(ctx context.Context, id string) (*State, error)
	// Stop makes the child id end soon with cause (its parent ended
	// without waiting for it: [ErrParentEnded]) unless it ended already;
	// Wait then returns its end.
	Stop(ctx context.Context, id string, cause error) error
}

// TeamTools returns the tool descriptions of the team tools, as
// [RunCreated].Tools records them: a run offers them when they are
// among its tools (keel run --team).
func TeamTools() []ToolInfo { return ToolInfos(teamTools()) }

// teamTools validates the team tools' arguments; the executor runs them
// (spawn, wait), never their handlers. It is built on first use, not
// when the package is initialised: compiling the schemas cost every
// keel process (a sandbox's init too) milliseconds at start.
var teamTools = sync.OnceValue(func() *tool.Registry {
	r := tool.NewRegistry()
	never := func(context.Context, *tool.Request) (*tool.Result, error) {
		return nil, errors.New("agent: team tools run in the executor")
	}
	r.Add(&tool.Tool{Name: SpawnTool, Description: spawnDescription, InputSchema: json.RawMessage(spawnSchema), Effect: tool.WorkspaceWrite, Idempotent: true}, never)
	r.Add(&tool.Tool{Name: HandoffTool, Description: handoffDescription, InputSchema: json.RawMessage(handoffSchema), Effect: tool.WorkspaceWrite, Idempotent: true}, never)
	r.Add(&tool.Tool{Name: WaitTool, Description: waitDescription, InputSchema: json.RawMessage(waitSchema), Effect: tool.ReadOnly, Idempotent: true}, never)
	return r
})

const spawnDescription = `Start a child agent on a task: a run of its own, with a fresh context, in the same workspace, under a slice of your budget and at most your permissions. Give it a self-contained task (it sees nothing of your conversation). "agent" names one of the agent definitions listed in your instructions, or leave it out and give "system" and "tools" inline. With "wait": false the call returns at once with the child's id, so you can start several children that work in parallel and collect their results with wait_agents; otherwise it returns the child's result. Each child's result is given to you exactly once.`

const spawnSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["task"],
  "properties": {
    "task": {"type": "string", "description": "what the child must do, self-contained"},
    "agent": {"type": "string", "description": "name of an agent definition"},
    "system": {"type": "string", "description": "the child's system prompt (default: the definition's, or yours)"},
    "tools": {"type": "array", "items": {"type": "string"}, "description": "tools the child may use: a subset of yours (default: the definition's, or yours without spawn_agent and wait_agents)"},
    "network": {"type": "array", "items": {"type": "string"}, "description": "hosts the child may reach: a subset of yours"},
    "paths": {"type": "array", "items": {"type": "string"}, "description": "workspace paths the child may write (default: yours)"},
    "scopes": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}, "description": "per credential provider, the scopes the child's credentials may carry at most: a subset of yours"},
    "limits": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "max_steps": {"type": "integer", "minimum": 0},
        "max_tokens": {"type": "integer", "minimum": 0},
        "max_cost": {"type": "number", "minimum": 0},
        "max_tool_calls": {"type": "integer", "minimum": 0},
        "max_children": {"type": "integer", "minimum": 0},
        "max_depth": {"type": "integer", "minimum": 0}
      }
    },
    "wait": {"type": "boolean", "description": "wait for the child's result (default true)"}
  }
}`

const handoffDescription = `Hand the task over to another agent, named by one of the agent definitions listed in your instructions: it takes over with its own instructions, tools and model, under all of your remaining budget and at most your permissions, and your run ends as its run ends, with its result. Use it when the work changes hands (say, from investigating to fixing, or to reviewing). Give in "message" everything the next agent must know: it sees the task and your message, not your conversation.`

const handoffSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["agent", "message"],
  "properties": {
    "agent": {"type": "string", "description": "name of an agent definition"},
    "message": {"type": "string", "description": "what the next agent must know: what was done, what is left"}
  }
}`

// handoffArgs are handoff's arguments.
type handoffArgs struct {
	Agent   string `json:"agent"`
	Message string `json:"message"`
}

// asSpawn returns a handoff's arguments as the spawn it makes: a child
// from the named definition, given the run's task and the message, with
// every axis of what the run has left.
func (x *executor) asSpawn(args json.RawMessage) (json.RawMessage, error) {
	var in handoffArgs
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, err
	}
	l, u := x.st.Limits, x.st.Used()
	var ask Limits
	if l.MaxSteps > 0 {
		ask.MaxSteps = max(1, l.MaxSteps-u.Steps-1)
	}
	if l.MaxToolCalls > 0 {
		ask.MaxToolCalls = max(1, l.MaxToolCalls-u.ToolCalls-1)
	}
	if l.MaxTokens > 0 {
		ask.MaxTokens = max(1, l.MaxTokens-u.Tokens)
	}
	if l.MaxCost > 0 {
		ask.MaxCost = max(1e-9, l.MaxCost-u.Cost)
	}
	if l.MaxChildren > 0 {
		ask.MaxChildren = max(0, l.MaxChildren-u.Children-1)
	}
	from := "another agent"
	if p := x.st.Created.Parent; p != nil && p.Agent != "" {
		from = "the agent " + p.Agent
	}
	task := fmt.Sprintf("You take over a task from %s, which handed it to you.\n\nThe task:\n%s\n\nIts message to you:\n%s", from, x.st.Created.Task, in.Message)
	return json.Marshal(map[string]any{"task": task, "agent": in.Agent, "limits": ask})
}

// handoff runs a handoff call: a spawn (of every axis left) that waits
// for its child; once the child is delivered to it, the run ends as the
// child ended ([handedOff]).
func (x *executor) handoff(ctx context.Context, c *Call, args json.RawMessage) *tool.Result {
	var in handoffArgs
	if err := json.Unmarshal(args, &in); err != nil || in.Agent == "" || strings.TrimSpace(in.Message) == "" {
		return errResult(`a handoff needs "agent" (a definition's name) and a "message"`)
	}
	x.mu.Lock()
	sargs, err := x.asSpawn(args)
	x.mu.Unlock()
	if err != nil {
		return errResult("bad arguments: " + err.Error())
	}
	return x.spawn(ctx, c, sargs)
}

const waitDescription = `Wait for child agents started with spawn_agent and get their results: "all" (the default) waits for every one named (or every child whose result you have not received yet when "agents" is left out), "any" for the first to end, "one" for the single child named. Each result comes once: a child whose result you already received is listed as such.`

const waitSchema = `{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "agents": {"type": "array", "items": {"type": "string"}, "description": "child ids (default: every child whose result you have not received)"},
    "mode": {"type": "string", "enum": ["one", "any", "all"]}
  }
}`

// spawnArgs are spawn_agent's arguments.
type spawnArgs struct {
	Task    string              `json:"task"`
	Agent   string              `json:"agent"`
	System  string              `json:"system"`
	Tools   *[]string           `json:"tools"`
	Network *[]string           `json:"network"`
	Paths   *[]string           `json:"paths"`
	Scopes  map[string][]string `json:"scopes"`
	Limits  Limits              `json:"limits"`
	Wait    *bool               `json:"wait"`
}

type waitArgs struct {
	Agents []string `json:"agents"`
	Mode   string   `json:"mode"`
}

// registry returns the registry that holds tool name for this run: the
// team tools' own when the run offers them.
func (x *executor) registry(name string) *tool.Registry {
	if teamTool(name) && hasTool(x.st.Created, name) {
		return teamTools()
	}
	return x.p.Tools
}

// retired reports whether name is a tool that still runs for the runs
// offered it but is offered to no new run ([tool.Tool.Unlisted]): a
// definition written when it was offered may still name it, and the
// child simply does not get it.
func (x *executor) retired(name string) bool {
	if x.p.Tools == nil {
		return false
	}
	t := x.p.Tools.Tool(name)
	return t != nil && t.Unlisted
}

// definition returns what a spawn asks for: the named definition of the
// run's definitions with the inline fields over it.
func (x *executor) definition(in *spawnArgs) (*AgentDef, error) {
	d := &AgentDef{}
	if in.Agent != "" {
		i := slices.IndexFunc(x.st.Created.Agents, func(a AgentDef) bool { return a.Name == in.Agent })
		if i < 0 {
			var names []string
			for _, a := range x.st.Created.Agents {
				names = append(names, a.Name)
			}
			return nil, fmt.Errorf("no agent definition %q (defined: %s)", in.Agent, strings.Join(names, ", "))
		}
		c := x.st.Created.Agents[i]
		d = &c
	}
	if in.System != "" {
		d.System = in.System
	}
	if in.Tools != nil {
		d.Tools = *in.Tools
	}
	if in.Network != nil {
		d.Network = *in.Network
	}
	if in.Paths != nil {
		d.Paths = *in.Paths
	}
	if d.Paths != nil {
		paths, err := x.writable(d.Paths)
		if err != nil {
			return nil, err
		}
		d.Paths = paths
	}
	if in.Scopes != nil {
		d.Scopes = in.Scopes
	}
	for _, v := range []struct {
		dst *int
		src int
	}{{&d.Limits.MaxSteps, in.Limits.MaxSteps}, {&d.Limits.MaxToolCalls, in.Limits.MaxToolCalls}, {&d.Limits.MaxChildren, in.Limits.MaxChildren}, {&d.Limits.MaxDepth, in.Limits.MaxDepth}} {
		if v.src > 0 {
			*v.dst = v.src
		}
	}
	if in.Limits.MaxTokens > 0 {
		d.Limits.MaxTokens = in.Limits.MaxTokens
	}
	if in.Limits.MaxCost > 0 {
		d.Limits.MaxCost = in.Limits.MaxCost
	}
	return d, nil
}

// writable returns the paths a child asks to write as workspace-relative
// paths, or an error when one is outside the workspace or protected
// (.keel, git's metadata, the run's protected paths): such a child could
// write nothing there, and would spend its slice learning it.
func (x *executor) writable(paths []string) ([]string, error) {
	if x.p.Env == nil || x.p.Env.Workspace == nil {
		return paths, nil
	}
	ws := x.p.Env.Workspace
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		rel, err := ws.Resolve(p)
		if err != nil {
			return nil, fmt.Errorf("the child asks to write %q, which it may not: %v", p, err)
		}
		if lex, lerr := ws.Rel(p); ws.Protected(rel) || lerr == nil && ws.Protected(lex) {
			return nil, fmt.Errorf("the child asks to write %q, a protected path (read-only for every agent)", p)
		}
		out = append(out, rel)
	}
	return out, nil
}

// spawnCheck is the gate's part of a spawn: the facts the policy sees
// (context.facts: depth, fanout, children, tools, hosts, paths, agent)
// and, when the child would be wider than its parent or deeper than
// allowed, why it is refused.
func (x *executor) spawnCheck(call string, args json.RawMessage) (map[string]any, string) {
	var in spawnArgs
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, "the arguments do not decode: " + err.Error()
	}
	cr := x.st.Created
	depth := 1
	if cr.Parent != nil {
		depth = cr.Parent.Depth + 1
	}
	d, err := x.definition(&in)
	if err != nil {
		return nil, err.Error()
	}
	// The fan-out counts the children spawned and the spawns of this
	// turn before this one (a turn's calls are decided together).
	fanout := len(x.st.Children)
	if t := x.st.LastTurn(); t != nil {
		for _, c := range t.Calls {
			if c.ID == call {
				break
			}
			if starts(c.Name) && x.st.childOf(c.ID) == nil {
				fanout++
			}
		}
	}
	var providers []string
	for p := range d.Scopes {
		providers = append(providers, p)
	}
	slices.Sort(providers)
	facts := map[string]any{"depth": depth, "fanout": fanout, "agent": in.Agent,
		"tools": d.Tools, "hosts": d.Network, "paths": d.Paths, "providers": providers,
		"principal": SubPrincipal(cr.Principal, d.Name)}
	var names []string
	for _, t := range cr.Tools {
		names = append(names, t.Name)
	}
	if m := slices.DeleteFunc(missing(names, d.Tools), x.retired); len(m) > 0 {
		return facts, fmt.Sprintf("the child asks for tools its parent does not have: %s", strings.Join(m, ", "))
	}
	if m := missing(cr.Network, d.Network); len(m) > 0 {
		return facts, fmt.Sprintf("the child asks for hosts its parent may not reach: %s", strings.Join(m, ", "))
	}
	if cr.Parent != nil && len(cr.Parent.Paths) > 0 {
		if d.Paths == nil {
			d.Paths = cr.Parent.Paths
		}
		for _, p := range d.Paths {
			if !underAny(p, cr.Parent.Paths) {
				return facts, fmt.Sprintf("the child asks to write %s, outside its parent's paths (%s)", p, strings.Join(cr.Parent.Paths, ", "))
			}
		}
	}
	if _, wider := boundScopes(scopeBound(cr), d.Scopes); len(wider) > 0 {
		return facts, fmt.Sprintf("the child asks for credential scopes its parent may not use: %s", strings.Join(wider, "; "))
	}
	if slices.ContainsFunc(d.Tools, starts) {
		l := x.st.Limits
		if l.MaxDepth > 0 && l.MaxDepth-1 < 1 {
			return facts, fmt.Sprintf("the child asks for spawn_agent at depth %d, the deepest this tree allows (max depth %d below its root)", depth, depth)
		}
		if l.MaxChildren > 0 && d.Limits.MaxChildren == 0 {
			return facts, "the child asks for spawn_agent without a slice of children (limits.max_children)"
		}
	}
	return facts, ""
}

// childCreated derives the run.created of a child from its parent's and
// its definition: the parent's tools (less those offered only with
// memory, which a child is not offered), hosts and paths intersected
// with what the definition asks, the slice as its limits.
func (x *executor) childCreated(call string, in *spawnArgs, d *AgentDef, slice Limits) *RunCreated {
	cr := x.st.Created
	c := *cr
	// The child's run.created is journaled by its own runtime: a secret
	// the model wrote into the task stays a placeholder there too.
	c.Task = x.secrets.sealText(in.Task)
	if d.System != "" {
		c.System = d.System
	}
	if d.Model != "" {
		c.Model = d.Model
	}
	want := d.Tools
	if want == nil {
		for _, t := range cr.Tools {
			if !teamTool(t.Name) {
				want = append(want, t.Name)
			}
		}
	}
	c.Tools = nil
	for _, t := range cr.Tools {
		if !slices.Contains(want, t.Name) {
			continue
		}
		if teamTool(t.Name) && !maySpawn(x.st.Limits, slice) {
			continue
		}
		// A child is offered no memory (its recall is cleared below),
		// so not the tools that need it: it could not call them.
		if recallTool(t) {
			continue
		}
		c.Tools = append(c.Tools, t)
	}
	c.Network = intersect(cr.Network, d.Network)
	c.Limits = slice
	root, depth := x.runID, 1
	var paths []string
	if cr.Parent != nil {
		root, depth, paths = cr.Parent.Root, cr.Parent.Depth+1, cr.Parent.Paths
	}
	if d.Paths != nil {
		paths = d.Paths
	}
	scopes, _ := boundScopes(scopeBound(cr), d.Scopes)
	c.Parent = &ParentLink{Run: x.runID, Call: call, Root: root, Depth: depth, Agent: d.Name, Paths: paths,
		Actors: actorsOf(cr), Scopes: scopes}
	// The child acts as an identity of its own below its parent's.
	c.Principal = SubPrincipal(cr.Principal, d.Name)
	c.Setup, c.SetupNetwork, c.Git, c.Recall = "", nil, nil, nil
	// A parent that has read untrusted input wrote the task from a
	// context the injection is part of: the child starts untrusted
	// (trial 7, P5), as the parent reads the child's result after it
	// (ToolFinished.Label). A parent's own untrusted task is in its
	// flow already, so a grandchild inherits the mark.
	x.mu.Lock()
	if m := x.st.Flow.Untrusted; m != nil {
		c.TaskUntrusted = fmt.Sprintf("the task from parent %s (call %s), which had read untrusted input: %s", x.runID, call, m)
	}
	x.mu.Unlock()
	return &c
}

// spawn runs a spawn_agent call: it reserves the child's slice and
// journals child.spawned (once: a spawn re-run after a crash finds its
// child), starts the child through the launcher, and, unless asked not
// to wait, waits for its result.
func (x *executor) spawn(ctx context.Context, c *Call, args json.RawMessage) *tool.Result {
	if x.p.Team == nil {
		return errResult("this runtime cannot start child agents (no launcher)")
	}
	var in spawnArgs
	if err := json.Unmarshal(args, &in); err != nil {
		return errResult("bad arguments: " + err.Error())
	}
	x.mu.Lock()
	ch := x.st.childOf(c.ID)
	x.mu.Unlock()
	if ch == nil {
		if strings.TrimSpace(in.Task) == "" {
			return errResult("the task is empty")
		}
		d, err := x.definition(&in)
		if err != nil {
			return errResult(err.Error())
		}
		// The reservation reads what is used and appends in one critical
		// section: concurrent spawns of a turn never give away the same
		// budget twice.
		x.teamMu.Lock()
		x.mu.Lock()
		// The parent keeps a model call to answer with the result, and
		// one more to call wait_agents when it does not wait now.
		keep := 1
		if in.Wait != nil && !*in.Wait {
			keep = 2
		}
		slice, why := sliceOf(x.st.Limits, x.st.Used(), d.Limits, keep)
		x.mu.Unlock()
		if why != "" {
			x.teamMu.Unlock()
			return errResult(why)
		}
		id := childID(x.runID, c.ID)
		created := x.childCreated(c.ID, &in, d, slice)
		err = x.append(ctx, journal.ChildSpawned, &ChildSpawned{Child: id, CallID: c.ID, Agent: d.Name, Slice: slice, Created: created})
		x.teamMu.Unlock()
		if err != nil {
			return &tool.Result{IsError: true, Content: "the runtime could not journal the spawn: " + err.Error()}
		}
		x.mu.Lock()
		ch = x.st.childOf(c.ID)
		x.mu.Unlock()
	}
	if err := x.p.Team.Start(ctx, ch.ID, ch.Spawned.Created); err != nil {
		return errResult(fmt.Sprintf("child %s could not be started: %v", ch.ID, err))
	}
	if in.Wait != nil && !*in.Wait {
		return &tool.Result{Content: fmt.Sprintf("started child %s with slice %s; collect its result with wait_agents", ch.ID, ch.Spawned.Slice)}
	}
	return x.deliver(ctx, c.ID, []string{ch.ID}, "all")
}

// waitAgents runs a wait_agents call.
func (x *executor) waitAgents(ctx context.Context, c *Call, args json.RawMessage) *tool.Result {
	if x.p.Team == nil {
		return errResult("this runtime cannot follow child agents (no launcher)")
	}
	var in waitArgs
	if err := json.Unmarshal(args, &in); err != nil {
		return errResult("bad arguments: " + err.Error())
	}
	if in.Mode == "" {
		in.Mode = "all"
	}
	x.mu.Lock()
	ids := in.Agents
	if ids == nil {
		for _, ch := range x.st.Children {
			if ch.Delivered == nil || ch.Delivered.CallID == c.ID {
				ids = append(ids, ch.ID)
			}
		}
	}
	var unknown []string
	for _, id := range ids {
		if x.st.child(id) == nil {
			unknown = append(unknown, id)
		}
	}
	x.mu.Unlock()
	switch {
	case len(unknown) > 0:
		return errResult("no child of this run: " + strings.Join(unknown, ", "))
	case in.Mode == "one" && len(ids) != 1:
		return errResult(`mode "one" needs exactly one child in "agents"`)
	case len(ids) == 0:
		return &tool.Result{Content: "no child is waiting to be delivered"}
	}
	return x.deliver(ctx, c.ID, ids, in.Mode)
}

// deliver waits for the children ids (all of them, or with mode "any"
// the first to end), journals child.delivered for each that ended and
// was not delivered before, and returns their results as call's result.
// A child already delivered to another call is listed as such; one
// delivered to this very call (a re-run after a crash) gets the same
// text again, from the journal.
func (x *executor) deliver(ctx context.Context, call string, ids []string, mode string) *tool.Result {
	type ended struct {
		id  string
		st  *State
		err error
	}
	var wait []string
	x.mu.Lock()
	for _, id := range ids {
		if x.st.child(id).Delivered == nil {
			wait = append(wait, id)
		}
	}
	x.mu.Unlock()
	if x.p.PauseForChildren && ctx.Err() == nil {
		if r := x.deliverEnded(ctx, call, ids, wait, mode); r != nil {
			return r
		}
		wait = nil // every child waited for ended: the text below gives them
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan ended, len(wait))
	for _, id := range wait {
		x.mu.Lock()
		created := x.st.child(id).Spawned.Created
		x.mu.Unlock()
		// A child left by a crash (of this process, which ran it) is
		// started again; one that runs or ended is not.
		if err := x.p.Team.Start(ctx, id, created); err != nil {
			ch <- ended{id: id, err: err}
			continue
		}
		go func() {
			st, err := x.p.Team.Wait(wctx, id)
			ch <- ended{id, st, err}
		}()
	}
	var failed []string
	paused, got := 0, 0
	for range wait {
		var e ended
		select {
		case e = <-ch:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if e.err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", e.id, e.err))
			continue
		}
		if !e.st.Status.Terminal() {
			// Paused, and no execution drives it (LocalTeam.ReturnPaused):
			// it waits for a person.
			paused++
			continue
		}
		if err := x.delivered(ctx, call, e.id, e.st); err != nil {
			return &tool.Result{IsError: true, Content: "the runtime could not journal a child's result: " + err.Error()}
		}
		got++
		if mode == "any" {
			break
		}
	}
	if paused > 0 && len(failed) == 0 && ctx.Err() == nil && (mode != "any" || got == 0) {
		// A child waits for a person: so does this call, left open, and
		// the run pauses until it is resumed (the children that ended are
		// delivered to it already).
		return awaitChildren
	}
	var b strings.Builder
	x.mu.Lock()
	for _, id := range ids {
		d := x.st.child(id).Delivered
		switch {
		case d == nil:
			fmt.Fprintf(&b, "## child %s: still running\n\n", id)
		case d.CallID != call:
			fmt.Fprintf(&b, "## child %s: %s; its result was given to you before (call %s)\n\n", id, d.Status, d.CallID)
		default:
			b.WriteString(resultText(d))
		}
	}
	x.mu.Unlock()
	for _, f := range failed {
		fmt.Fprintf(&b, "## could not follow child %s\n\n", f)
	}
	if ctx.Err() != nil {
		b.WriteString("[the run was stopped while it waited; the children not delivered above stop with it]\n")
	}
	return &tool.Result{Content: strings.TrimRight(b.String(), "\n"), IsError: ctx.Err() != nil || len(failed) > 0}
}

// awaitChildren is the result of a team call that waits for children
// that have not ended, with [ExecParams].PauseForChildren, or for a
// child paused for a person with [LocalTeam].ReturnPaused: the call is
// left open and the run pauses ([ReasonChildren]).
var awaitChildren = &tool.Result{IsError: true, Content: "waiting for children"}

// errAwaitChildren is runOne's error for a call that returned
// awaitChildren: the loop pauses the run.
var errAwaitChildren = errors.New("agent: a team call waits for children")

// deliverEnded is deliver without waiting (PauseForChildren): each child
// of wait is started unless it runs or ended, and those that ended are
// delivered now. It returns awaitChildren when the call must wait for
// more (mode "all" or "one": a child of wait has not ended; "any": none
// has), a result when a child could not be followed, nil otherwise.
func (x *executor) deliverEnded(ctx context.Context, call string, ids, wait []string, mode string) *tool.Result {
	ended := 0
	for _, id := range wait {
		x.mu.Lock()
		created := x.st.child(id).Spawned.Created
		x.mu.Unlock()
		if err := x.p.Team.Start(ctx, id, created); err != nil {
			return errResult(fmt.Sprintf("could not follow child %s: %v", id, err))
		}
		st, _, err := x.rt.Load(ctx, id)
		if err != nil {
			return errResult(fmt.Sprintf("could not follow child %s: %v", id, err))
		}
		if !st.Status.Terminal() {
			continue
		}
		if err := x.delivered(ctx, call, id, st); err != nil {
			return &tool.Result{IsError: true, Content: "the runtime could not journal a child's result: " + err.Error()}
		}
		ended++
	}
	if ended == len(wait) || mode == "any" && ended > 0 {
		return nil
	}
	return awaitChildren
}

// undelivered returns the ids of the run's children whose results have
// not been delivered yet.
func (x *executor) undelivered() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var ids []string
	for _, ch := range x.st.Children {
		if ch.Delivered == nil {
			ids = append(ids, ch.ID)
		}
	}
	return ids
}

// pauseForChildren pauses the run whose team call waits for children
// (errAwaitChildren): the call stays open, and runs again at the resume.
func (x *executor) pauseForChildren(ctx context.Context) error {
	if err := x.settle(ctx); err != nil {
		return err
	}
	ids := x.undelivered()
	msg := "waiting for child agents to end: " + strings.Join(ids, ", ")
	for _, id := range ids {
		if w := x.childWaits(ctx, id); w != "" {
			msg += "; " + w
		}
	}
	return x.append(ctx, journal.RunPaused, &RunEnded{Reason: ReasonChildren, Message: msg})
}

// childWaits says what child id, if paused, waits for ("" if it is not
// paused): the calls waiting for a person's approval or authorization,
// the inputs it asked for, or its pause's own message (a child paused
// for its children names theirs).
func (x *executor) childWaits(ctx context.Context, id string) string {
	st, _, err := x.rt.Load(context.WithoutCancel(ctx), id)
	if err != nil || st.Status != journal.StatusPaused {
		return ""
	}
	var waits []string
	for _, p := range st.Pending() {
		waits = append(waits, fmt.Sprintf("approval of %s (%s)", p.CallID, p.Tool))
	}
	for _, p := range st.PendingAuths() {
		waits = append(waits, fmt.Sprintf("authorization of %s (%s, provider %s)", p.CallID, p.Tool, p.Provider))
	}
	for _, p := range st.PendingInputs() {
		waits = append(waits, "an answer to input "+p.ID)
	}
	switch {
	case len(waits) > 0:
		return fmt.Sprintf("%s waits for a person: %s", id, strings.Join(waits, ", "))
	case st.Ended != nil:
		return fmt.Sprintf("%s is paused (%s: %s)", id, st.Ended.Reason, st.Ended.Message)
	}
	return id + " is paused"
}

// delivered journals child.delivered of child id, which ended as st,
// unless it was delivered already.
func (x *executor) delivered(ctx context.Context, call, id string, st *State) error {
	x.teamMu.Lock()
	defer x.teamMu.Unlock()
	x.mu.Lock()
	done := x.st.child(id).Delivered != nil
	x.mu.Unlock()
	if done {
		return nil
	}
	return x.append(ctx, journal.ChildDelivered, childResult(call, id, st))
}

// reap ends the children of a run that is ending without having waited
// for them: each is stopped ([ErrParentEnded]), waited for, and its
// result journaled as child.delivered to no call (Unwaited), so that
// what it spent counts in the run's total and no child outlives its
// parent unaccounted. A run killed while it reaps does it again when it
// is resumed and ends.
func (x *executor) reap(ctx context.Context) error {
	ids := x.undelivered()
	if len(ids) == 0 || x.p.Team == nil {
		return nil
	}
	for _, id := range ids {
		if err := x.p.Team.Stop(ctx, id, ErrParentEnded); err != nil {
			return fmt.Errorf("agent: stop child %s: %w", id, err)
		}
	}
	for _, id := range ids {
		st, err := x.p.Team.Wait(ctx, id)
		if err != nil {
			return fmt.Errorf("agent: wait for child %s: %w", id, err)
		}
		x.teamMu.Lock()
		d := childResult("", id, st)
		d.Unwaited = true
		err = x.append(ctx, journal.ChildDelivered, d)
		x.teamMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// stopChildren is reap for a run whose execution was stopped (canceled,
// or its time limit): its children not delivered yet stop with the same
// cause (its context's end stops those its launcher executes; a paused
// one is ended here), and each that this launcher executed or that has
// ended is journaled as child.delivered given to no call, so that the
// run counts what they spent instead of their whole slices. A driver
// that pauses for children (the cluster's) leaves them to its own
// control stream.
func (x *executor) stopChildren(ctx context.Context, cause error) error {
	if x.p.Team == nil || x.p.PauseForChildren {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	ids := x.undelivered()
	for _, id := range ids {
		if err := x.p.Team.Stop(ctx, id, cause); err != nil {
			return fmt.Errorf("agent: stop child %s: %w", id, err)
		}
	}
	for _, id := range ids {
		var st *State
		if lt, ok := x.p.Team.(*LocalTeam); ok && lt.executes(id) {
			var err error
			if st, err = lt.Wait(ctx, id); err != nil {
				return fmt.Errorf("agent: wait for child %s: %w", id, err)
			}
		} else {
			st, _, _ = x.rt.Load(ctx, id)
		}
		if st == nil || !st.Status.Terminal() {
			continue // executed elsewhere: it stops there
		}
		x.teamMu.Lock()
		d := childResult("", id, st)
		d.Unwaited = true
		err := x.append(ctx, journal.ChildDelivered, d)
		x.teamMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// childResult is what a parent is given of a child that ended as st:
// its output, or a salvaged one (its last assistant text) with why it
// stopped.
func childResult(call, id string, st *State) *ChildDelivered {
	d := &ChildDelivered{Child: id, CallID: call, Spend: st.Used(), Label: childLabel(st)}
	if st.Ended != nil {
		d.Reason, d.Message, d.Output = st.Ended.Reason, st.Ended.Message, st.Ended.Output
	}
	switch {
	case st.Status == journal.StatusCompleted && strings.TrimSpace(d.Output) != "":
		d.Status = ChildCompleted
	case st.Status == journal.StatusCompleted:
		d.Status = ChildNoOutput
	case st.Status == journal.StatusCanceled:
		d.Status = ChildCanceled
	case d.Reason == ReasonBudgetExhausted:
		d.Status = ChildBudgetExhausted
	default:
		d.Status = ChildFailed
	}
	if strings.TrimSpace(d.Output) == "" {
		for i := len(st.Messages) - 1; i >= 0; i-- {
			if m := st.Messages[i]; m.Role == model.RoleAssistant && strings.TrimSpace(m.Content) != "" {
				d.Output, d.Salvaged = m.Content, true
				break
			}
		}
	}
	return d
}

// resultText renders a delivered child for its parent's model.
func resultText(d *ChildDelivered) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## child %s: %s", d.Child, d.Status)
	if d.Reason != "" && d.Status != ChildCompleted {
		fmt.Fprintf(&b, " (%s: %s)", d.Reason, d.Message)
	}
	fmt.Fprintf(&b, "\nspent: %s\n", d.Spend)
	switch {
	case d.Output == "":
		b.WriteString("(no output)\n")
	case d.Salvaged:
		b.WriteString("its last message (salvaged, it gave no final output):\n" + d.Output + "\n")
	default:
		b.WriteString(d.Output + "\n")
	}
	return b.String() + "\n"
}

func errResult(s string) *tool.Result { return &tool.Result{IsError: true, Content: s} }

// teamDecide is the gate's part for the team tools and for children's
// path ceilings: it returns a deny decision, or nil to go on to the
// policy with facts.
func (x *executor) teamDecide(call, name string, args json.RawMessage, paths []string, effect tool.Effect, scoped bool) (*policy.Decision, map[string]any) {
	cr := x.st.Created
	if starts(name) {
		handoff := name == HandoffTool
		if handoff {
			var in handoffArgs
			if err := json.Unmarshal(args, &in); err != nil || in.Agent == "" {
				return &policy.Decision{Effect: policy.Deny, Policies: []string{PolicyTeam}, Reason: "a handoff names the agent definition to hand over to"}, nil
			}
			var err error
			if args, err = x.asSpawn(args); err != nil {
				return &policy.Decision{Effect: policy.Deny, Policies: []string{PolicyTeam}, Reason: err.Error()}, nil
			}
		}
		facts, why := x.spawnCheck(call, args)
		if facts != nil {
			facts["handoff"] = handoff
		}
		if why != "" {
			return &policy.Decision{Effect: policy.Deny, Policies: []string{PolicyTeam}, Reason: why}, facts
		}
		return nil, facts
	}
	if cr.Parent == nil || len(cr.Parent.Paths) == 0 || effect == tool.ReadOnly || teamTool(name) {
		return nil, nil
	}
	if !scoped {
		return &policy.Decision{Effect: policy.Deny, Policies: []string{PolicyTeam}, Reason: fmt.Sprintf("this child may write only %s, and %s may write anywhere in the workspace", strings.Join(cr.Parent.Paths, ", "), name)}, nil
	}
	for _, p := range paths {
		if !underAny(p, cr.Parent.Paths) {
			return &policy.Decision{Effect: policy.Deny, Policies: []string{PolicyTeam}, Reason: fmt.Sprintf("this child may write only %s, not %s", strings.Join(cr.Parent.Paths, ", "), p)}, nil
		}
	}
	return nil, nil
}
