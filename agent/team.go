package agent

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// Agent teams: a run starts child runs (spawn_agent), each under a slice
// of its budget reserved in its journal (child.spawned) and a ceiling of
// its permissions, and receives each child's result once
// (child.delivered). See docs/teams.md.

// Names of the team tools. The executor runs them itself (team_exec.go):
// they change the run's own journal.
const (
	SpawnTool   = "spawn_agent"
	WaitTool    = "wait_agents"
	HandoffTool = "handoff"
)

// PolicyTeam is the policy id of spawn decisions Keel makes itself: a
// child that would be wider than its parent, or deeper than allowed.
const PolicyTeam = "keel.team"

// ParentLink links a child run to its parent ([RunCreated].Parent).
type ParentLink struct {
	// Run and Call are the parent run and its spawn_agent call; Root the
	// run at the top of the tree.
	Run  string `json:"run"`
	Call string `json:"call"`
	Root string `json:"root"`
	// Depth is 1 for a child of a root run, 2 for a grandchild...
	Depth int `json:"depth"`
	// Agent names the definition the child was made from ("" inline).
	Agent string `json:"agent,omitempty"`
	// Paths, when set, are the workspace paths (prefixes) the child may
	// write; calls writing elsewhere, and commands that may write
	// anywhere (bash), are denied (policy id keel.team).
	Paths []string `json:"paths,omitempty"`
	// Actors are the principals the child's principal acts for in turn,
	// nearest first: its parent's, then the parent's parent's, up to the
	// root's ([SubPrincipal]). The gate decides each call of the child
	// as each of them too, and the strictest decision stands.
	Actors []string `json:"actors,omitempty"`
	// Scopes, when set, bound the credentials the child's calls may use:
	// per provider, the scopes at most (a provider not named: no bound
	// beyond its parent's). Its parent's bound ∩ its definition's.
	Scopes map[string][]string `json:"scopes,omitempty"`
}

// SubPrincipal returns the principal of a child of a run executing as
// parent, made from the definition name ("" for an inline child):
// "PARENT/NAME", an agent identity of its own below its parent's
// (package identity: revoking the parent revokes it too, and it may be
// revoked alone). It returns "" when parent is "" (a run without a
// principal).
func SubPrincipal(parent, name string) string {
	if parent == "" {
		return ""
	}
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && strings.ContainsRune("._-@", r):
			b.WriteRune(r)
		case b.Len() > 0:
			b.WriteByte('-')
		}
	}
	seg := b.String()
	if len(seg) > 64 {
		seg = seg[:64]
	}
	if seg == "" {
		seg = "inline"
	}
	return parent + "/" + seg
}

// actorsOf returns the principals a child of the run c acts for: c's
// own, then those c acts for.
func actorsOf(c *RunCreated) []string {
	if c.Principal == "" {
		return nil
	}
	out := []string{c.Principal}
	if c.Parent != nil {
		out = append(out, c.Parent.Actors...)
	}
	return out
}

// scopeBound returns the credential bound of the run c (nil: none).
func scopeBound(c *RunCreated) map[string][]string {
	if c.Parent == nil {
		return nil
	}
	return c.Parent.Scopes
}

// boundScopes returns the bound of a child: the parent's ∩ the
// definition's, per provider, and the providers the definition asks
// wider scopes of than its parent has (a widening the gate refuses).
func boundScopes(parent, def map[string][]string) (map[string][]string, []string) {
	if parent == nil && def == nil {
		return nil, nil
	}
	out := map[string][]string{}
	var wider []string
	for p, s := range parent {
		out[p] = slices.Clone(s)
	}
	for p, s := range def {
		have, ok := parent[p]
		if !ok {
			out[p] = slices.Clone(s)
			continue
		}
		if m := missing(have, s); len(m) > 0 {
			wider = append(wider, p+": "+strings.Join(m, " "))
		}
		out[p] = intersect(have, s)
		if out[p] == nil {
			out[p] = []string{}
		}
	}
	slices.Sort(wider)
	return out, wider
}

// AgentDef is a definition children can be made from: from a file
// .keel/agents/NAME.md (front matter and a body, the system prompt), or
// given inline to spawn_agent. Empty fields inherit the parent's.
type AgentDef struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// System is the child's system prompt ("" : the parent's).
	System string `json:"system,omitempty"`
	// Model is the child's model spec ("": the parent's). Only a
	// definition file sets it: spawn_agent's arguments cannot.
	Model string `json:"model,omitempty"`
	// Tools are the tools asked for (nil: the parent's, without the team
	// tools). Network the hosts, Paths the workspace paths the child may
	// write (nil: the parent's).
	Tools   []string `json:"tools,omitempty"`
	Network []string `json:"network,omitempty"`
	Paths   []string `json:"paths,omitempty"`
	// Scopes bound the credentials of the child's calls: per provider,
	// the scopes at most (nil: its parent's bound); see
	// [ParentLink].Scopes.
	Scopes map[string][]string `json:"scopes,omitempty"`
	// Limits is the slice asked for; zero fields take the default share
	// of what the parent has left (docs/teams.md).
	Limits Limits `json:"limits,omitempty"`
}

// ChildSpawned is the payload of journal.ChildSpawned: a child run
// started by call CallID, with the slice of the budget reserved for it.
type ChildSpawned struct {
	Child  string `json:"child"`
	CallID string `json:"call_id"`
	Agent  string `json:"agent,omitempty"`
	// Slice is what was reserved of each axis (the child's limits).
	Slice Limits `json:"slice"`
	// Created is the child's run.created, fixed here so that a spawn
	// retried after a crash creates the same child.
	Created *RunCreated `json:"created"`
}

// Spend is what a run and its subtree used, per axis of [Limits].
type Spend struct {
	Steps     int     `json:"steps,omitempty"`
	Tokens    int64   `json:"tokens,omitempty"`
	Cost      float64 `json:"cost,omitempty"`
	ToolCalls int     `json:"tool_calls,omitempty"`
	Children  int     `json:"children,omitempty"`
}

// Child statuses of [ChildDelivered].
const (
	ChildCompleted       = "completed"
	ChildFailed          = "failed"
	ChildBudgetExhausted = "budget_exhausted"
	ChildCanceled        = "canceled"
	ChildNoOutput        = "no_output"
)

// ChildDelivered is the payload of journal.ChildDelivered: a child's
// result given to the call CallID of its parent, once.
type ChildDelivered struct {
	Child  string `json:"child"`
	CallID string `json:"call_id"`
	// Status is one of the Child* constants; Reason and Message how the
	// child's run ended.
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Output is the child's final output or, when it has none
	// (Salvaged), its last assistant text.
	Output   string `json:"output,omitempty"`
	Salvaged bool   `json:"salvaged,omitempty"`
	// Spend is what the child and its subtree used; the rest of its
	// slice returns to the parent.
	Spend Spend `json:"spend"`
	// Unwaited marks a child whose parent ended without waiting for it:
	// the child was stopped (unless it had ended), and its result is
	// journaled here, given to no call (CallID is empty).
	Unwaited bool `json:"unwaited,omitempty"`
	// Label is what the child's data had been (its flow: untrusted input
	// seen, private data read; nil: neither). The result carries it into
	// the parent's flow: input laundered through a child is still
	// untrusted (trial 5, M11).
	Label *DataLabel `json:"label,omitempty"`
}

// Child is a child run as its parent's fold knows it.
type Child struct {
	ID        string
	Spawned   *ChildSpawned
	Delivered *ChildDelivered
}

func (x *ChildSpawned) Detail() string {
	d := fmt.Sprintf("%s by %s, slice %s", x.Child, x.CallID, x.Slice)
	if x.Agent != "" {
		d += " (agent " + x.Agent + ")"
	}
	return d
}

func (x *ChildDelivered) Detail() string {
	to := "to " + x.CallID
	if x.Unwaited {
		to = "at its parent's end, unwaited"
	}
	d := fmt.Sprintf("%s %s %s, spent %s", x.Child, x.Status, to, x.Spend)
	if x.Output != "" {
		d += ": " + Clip(OneLine(x.Output), 80)
	}
	return d
}

// String says a spend in a few words.
func (s Spend) String() string {
	d := fmt.Sprintf("%d steps, %s tok, %d tool calls", s.Steps, Num(s.Tokens), s.ToolCalls)
	if s.Cost > 0 {
		d += fmt.Sprintf(", $%.4f", s.Cost)
	}
	if s.Children > 0 {
		d += fmt.Sprintf(", %d children", s.Children)
	}
	return d
}

// applyTeam folds child.spawned and child.delivered.
func (s *State) applyTeam(seq int64, v any, bad func(string, ...any) error) error {
	switch p := v.(type) {
	case *ChildSpawned:
		if s.child(p.Child) != nil {
			return bad("second child.spawned of %s", p.Child)
		}
		if p.Created == nil {
			return bad("child.spawned of %s has no run.created", p.Child)
		}
		s.Children = append(s.Children, &Child{ID: p.Child, Spawned: p})
	case *ChildDelivered:
		c := s.child(p.Child)
		if c == nil {
			return bad("child.delivered of unknown child %s", p.Child)
		}
		if c.Delivered != nil {
			return bad("second child.delivered of %s", p.Child)
		}
		c.Delivered = p
		s.foldChildFlow(seq, p)
	}
	return nil
}

// foldChildFlow marks the flow of a child's result delivered at seq
// with the child's label.
func (s *State) foldChildFlow(seq int64, d *ChildDelivered) {
	l := d.Label
	if l == nil || d.Unwaited {
		return
	}
	if l.Integrity == LabelUntrusted && s.Flow.Untrusted == nil {
		s.Flow.Untrusted = &FlowMark{Seq: seq, CallID: d.CallID, Why: fmt.Sprintf("the result of child %s (it saw untrusted input)", d.Child)}
	}
	if (l.Confidentiality == LabelPrivate || l.Confidentiality == LabelSecret) && len(s.Flow.Private) < MaxPrivateMarks {
		s.Flow.Other = true
		s.Flow.Private = append(s.Flow.Private, &FlowMark{Seq: seq, CallID: d.CallID, Why: fmt.Sprintf("the result of child %s (it read private data)", d.Child)})
	}
}

// childLabel is the label of a child's result: its run's flow (nil:
// trusted and public).
func childLabel(st *State) *DataLabel {
	l := &DataLabel{}
	var why []string
	if st.Flow.Untrusted != nil {
		l.Integrity = LabelUntrusted
		why = append(why, "untrusted: "+st.Flow.Untrusted.String())
	}
	if len(st.Flow.Private) > 0 || len(st.Flow.Providers) > 0 || st.Flow.Other {
		l.Confidentiality = LabelPrivate
		if p := st.Flow.private(); p != "" {
			why = append(why, "private: "+p)
		}
	}
	if *l == (DataLabel{}) {
		return nil
	}
	l.Why = strings.Join(why, "; ")
	return l
}

func (s *State) child(id string) *Child {
	for _, c := range s.Children {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// childOf returns the child spawned by call id, or nil.
func (s *State) childOf(call string) *Child {
	for _, c := range s.Children {
		if c.Spawned.CallID == call {
			return c
		}
	}
	return nil
}

// Own returns what the run itself used: model calls, tokens, cost, tool
// calls started and children spawned (not what they spent).
func (s *State) Own() Spend {
	return Spend{Steps: s.Steps, Tokens: s.Usage.Total(), Cost: s.Cost, ToolCalls: s.ToolCalls, Children: len(s.Children)}
}

// Used returns what counts against the run's limits: its own spend, and
// for each child what it spent once delivered, else its whole reserved
// slice.
func (s *State) Used() Spend {
	u := s.Own()
	for _, c := range s.Children {
		var d Spend
		if c.Delivered != nil {
			d = c.Delivered.Spend
		} else {
			l := c.Spawned.Slice
			d = Spend{Steps: l.MaxSteps, Tokens: l.MaxTokens, Cost: l.MaxCost, ToolCalls: l.MaxToolCalls, Children: l.MaxChildren}
		}
		u.Steps += d.Steps
		u.Tokens += d.Tokens
		u.Cost += d.Cost
		u.ToolCalls += d.ToolCalls
		u.Children += d.Children
	}
	return u
}

// limitAction ends the run when one of its limits is reached by what it
// used ([State.Used]); a child ends with [ReasonBudgetExhausted].
// LimitReached reports the run limit s has reached, as the next step
// would end the run on it (its end reason and message): a resume under
// the same limits would stop again at once.
func LimitReached(s *State) (reason, msg string, ok bool) {
	a, ok := limitAction(s)
	if !ok {
		return "", "", false
	}
	return a.End.Reason, a.End.Message, true
}

func limitAction(s *State) (Action, bool) {
	l, u := s.Limits, s.Used()
	reason, msg := "", ""
	switch {
	case l.MaxSteps > 0 && u.Steps >= l.MaxSteps:
		reason, msg = ReasonMaxSteps, fmt.Sprintf("step limit reached: %d model calls", u.Steps)
		if u.Steps > l.MaxSteps {
			// A limit lowered below what the run had used.
			msg += fmt.Sprintf(", over the limit of %d", l.MaxSteps)
		}
	case l.MaxTokens > 0 && u.Tokens >= l.MaxTokens:
		reason, msg = ReasonMaxTokens, fmt.Sprintf("token limit reached: %d of %d tokens", u.Tokens, l.MaxTokens)
	case l.MaxCost > 0 && u.Cost >= l.MaxCost:
		reason, msg = ReasonMaxCost, fmt.Sprintf("cost limit reached: $%.4f of $%.4f", u.Cost, l.MaxCost)
	case l.MaxToolCalls > 0 && u.ToolCalls >= l.MaxToolCalls:
		reason, msg = ReasonMaxToolCalls, fmt.Sprintf("tool-call limit reached: %d tool calls", u.ToolCalls)
		if u.ToolCalls > l.MaxToolCalls {
			msg += fmt.Sprintf(", over the limit of %d", l.MaxToolCalls)
		}
	default:
		return Action{}, false
	}
	if len(s.Children) > 0 {
		msg += " (children included)"
	}
	if s.Created.Parent != nil {
		msg = "the slice of its parent's budget is spent: " + msg
		reason = ReasonBudgetExhausted
	}
	return finish(journal.RunFailed, reason, msg, "", ""), true
}

// Tree is a run and its children as the journal has them, for views.
type Tree struct {
	RunID  string
	Agent  string
	Status journal.Status
	Reason string
	// Limits are the run's (a child's: its slice); Own what it spent
	// itself; Used with its children ([State.Used]).
	Limits   Limits
	Own      Spend
	Used     Spend
	Children []*Tree
}

// Remaining returns what is left of each limited axis (0 for an axis
// without a limit).
func (t *Tree) Remaining() Spend {
	var r Spend
	if t.Limits.MaxSteps > 0 {
		r.Steps = max(0, t.Limits.MaxSteps-t.Used.Steps)
	}
	if t.Limits.MaxTokens > 0 {
		r.Tokens = max(0, t.Limits.MaxTokens-t.Used.Tokens)
	}
	if t.Limits.MaxCost > 0 {
		r.Cost = max(0, t.Limits.MaxCost-t.Used.Cost)
	}
	if t.Limits.MaxToolCalls > 0 {
		r.ToolCalls = max(0, t.Limits.MaxToolCalls-t.Used.ToolCalls)
	}
	if t.Limits.MaxChildren > 0 {
		r.Children = max(0, t.Limits.MaxChildren-t.Used.Children)
	}
	return r
}

// NewTree returns the node of the folded run s (without children: the
// caller loads each of s.Children and adds it).
func NewTree(s *State) *Tree {
	t := &Tree{RunID: s.RunID, Status: s.Status, Limits: s.Limits, Own: s.Own(), Used: s.Used()}
	if s.Ended != nil {
		t.Reason = s.Ended.Reason
	}
	if p := s.Created.Parent; p != nil {
		t.Agent = p.Agent
	}
	return t
}

// MaxTreeRuns bounds the runs a view reads for a tree.
const MaxTreeRuns = 500

// LoadTree returns the tree of the folded run st: each child read with
// events and folded, recursively, at most max runs below st. A child
// whose journal cannot be read or folded is a node that says so.
func LoadTree(st *State, events func(id string) ([]journal.Event, error), max int) *Tree {
	return loadTree(st, events, &max)
}

func loadTree(st *State, events func(id string) ([]journal.Event, error), budget *int) *Tree {
	t := NewTree(st)
	for _, c := range st.Children {
		if *budget <= 0 {
			break
		}
		*budget--
		evs, err := events(c.ID)
		var cs *State
		if err == nil {
			cs, err = Fold(c.ID, evs)
		}
		if err != nil {
			t.Children = append(t.Children, &Tree{RunID: c.ID, Agent: c.Spawned.Agent, Reason: "unreadable: " + err.Error(), Limits: c.Spawned.Slice})
			continue
		}
		t.Children = append(t.Children, loadTree(cs, events, budget))
	}
	return t
}

// childID is the run id of the child spawned by call of run: derived,
// so that a spawn retried after a crash finds its child.
func childID(run, call string) string { return run + "." + call }

// ChildEndedError refuses the resume of a child agent's run that ended
// ([ErrChildEnded]).
type ChildEndedError struct {
	Run, Parent, Root string
	Status            journal.Status
}

func (e *ChildEndedError) Error() string {
	return fmt.Sprintf("run %s is a child agent of run %s and has ended (%s): its result belongs to its parent, which counted its spend; resume or follow up %s instead", e.Run, e.Parent, e.Status, e.Root)
}

func (e *ChildEndedError) Unwrap() error { return ErrChildEnded }

// childEnded returns a [*ChildEndedError] when s is a child agent's run
// that ended, which no one may resume on its own.
func childEnded(s *State) error {
	if p := s.Created.Parent; p != nil && s.Status.Terminal() {
		return &ChildEndedError{Run: s.RunID, Parent: p.Run, Root: p.Root, Status: s.Status}
	}
	return nil
}

// CheckResumable returns a [*ChildEndedError] when s is a child agent's
// run that ended: front ends refuse its resume (and follow-ups) before
// anything is journaled.
func CheckResumable(s *State) error { return childEnded(s) }

// teamTool reports whether name is a team tool.
func teamTool(name string) bool { return name == SpawnTool || name == WaitTool || name == HandoffTool }

// starts reports whether the team tool name starts a child run.
func starts(name string) bool { return name == SpawnTool || name == HandoffTool }

// handedOff returns the end of a run whose newest turn handed control to
// another agent (a handoff call whose child was delivered to it): the
// run ends as that agent ended, with its output.
func handedOff(s *State, t *Turn) (Action, bool) {
	for _, c := range t.Calls {
		if c.Name != HandoffTool || c.Finished == nil {
			continue
		}
		ch := s.childOf(c.ID)
		if ch == nil || ch.Delivered == nil || ch.Delivered.CallID != c.ID {
			continue
		}
		d := ch.Delivered
		who := ch.ID
		if ch.Spawned.Agent != "" {
			who = ch.Spawned.Agent + " (" + ch.ID + ")"
		}
		if d.Status == ChildCompleted || d.Status == ChildNoOutput {
			return finish(journal.RunCompleted, ReasonHandoff, "handed off to "+who+", which completed", d.Output, ""), true
		}
		msg := fmt.Sprintf("handed off to %s, which ended %s", who, d.Status)
		if d.Message != "" {
			msg += ": " + d.Message
		}
		return finish(journal.RunFailed, ReasonHandoff, msg, d.Output, ""), true
	}
	return Action{}, false
}

// hasTool reports whether c offers the tool name.
func hasTool(c *RunCreated, name string) bool {
	for _, t := range c.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// underAny reports whether the workspace path p is one of prefixes or
// below one.
func underAny(p string, prefixes []string) bool {
	p = strings.Trim(p, "/")
	for _, q := range prefixes {
		q = strings.Trim(q, "/")
		if q == "" || q == "." || p == q || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}

// minTimeout returns the smaller of two timeouts, 0 meaning none.
func minTimeout(a, b Duration) Duration {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// sliceOf computes the slice of a child asking for ask, out of the
// parent's limits l of which used is used, keeping keep model calls for
// the parent (one to answer; two when it must also call wait_agents).
// It returns the slice, and a reason when the parent cannot give it
// (then the spawn is refused).
func sliceOf(l Limits, used Spend, ask Limits, keep int) (Limits, string) {
	var out Limits
	var why []string
	intAxis := func(name string, limit, used, asked int, keep int) int {
		if limit == 0 {
			return asked
		}
		left := limit - used - keep
		if asked == 0 {
			asked = max(1, left/4)
		}
		if left <= 0 || asked > left {
			why = append(why, fmt.Sprintf("%s: asks %d, %d left to give", name, asked, max(0, left)))
			return 0
		}
		return asked
	}
	out.MaxSteps = intAxis("model calls", l.MaxSteps, used.Steps, ask.MaxSteps, keep)
	out.MaxToolCalls = intAxis("tool calls", l.MaxToolCalls, used.ToolCalls, ask.MaxToolCalls, 1)
	if l.MaxTokens == 0 {
		out.MaxTokens = ask.MaxTokens
	} else {
		left := l.MaxTokens - used.Tokens
		asked := ask.MaxTokens
		if asked == 0 {
			asked = left / 4
		}
		if left <= 0 || asked <= 0 || asked > left {
			why = append(why, fmt.Sprintf("tokens: asks %d, %d left to give", asked, max(0, left)))
		}
		out.MaxTokens = asked
	}
	if l.MaxCost == 0 {
		out.MaxCost = ask.MaxCost
	} else {
		left := l.MaxCost - used.Cost
		asked := ask.MaxCost
		if asked == 0 {
			asked = left / 4
		}
		if left <= 0 || asked <= 0 || asked > left {
			why = append(why, fmt.Sprintf("cost: asks $%.4f, $%.4f left to give", asked, max(0, left)))
		}
		out.MaxCost = asked
	}
	// Children: the spawn itself counts one, the child's own slice the
	// rest it asks for.
	if l.MaxChildren > 0 {
		left := l.MaxChildren - used.Children
		if 1+ask.MaxChildren > left {
			why = append(why, fmt.Sprintf("children: this one and %d below it asked, %d left to give", ask.MaxChildren, max(0, left)))
		}
	}
	out.MaxChildren = ask.MaxChildren
	switch {
	case l.MaxDepth > 0:
		out.MaxDepth = l.MaxDepth - 1
		if ask.MaxDepth > 0 {
			out.MaxDepth = min(out.MaxDepth, ask.MaxDepth)
		}
	default:
		out.MaxDepth = ask.MaxDepth
	}
	out.Timeout = minTimeout(l.Timeout, ask.Timeout)
	if len(why) > 0 {
		return Limits{}, "the budget cannot give this child its slice (" + strings.Join(why, "; ") + ")"
	}
	return out, ""
}

// maySpawn reports whether a child with limits l under parent limits pl
// may spawn children itself: no limited axis of the parent left at zero
// in the child (zero would mean "no limit").
func maySpawn(pl, l Limits) bool {
	if pl.MaxDepth > 0 && l.MaxDepth == 0 {
		return false
	}
	if pl.MaxChildren > 0 && l.MaxChildren == 0 {
		return false
	}
	return true
}

// intersect returns the items of want that are in have (want nil: have).
func intersect(have, want []string) []string {
	if want == nil {
		return slices.Clone(have)
	}
	var out []string
	for _, w := range want {
		if slices.Contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}

// missing returns the items of want not in have.
func missing(have, want []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}

// safeOutputCap is the largest output limit beforeCall sets on a request
// that had none: below every model's maximum, which providers enforce.
const safeOutputCap = 4096

// waitPoll is how often a wait re-reads a child's journal that no
// append in this process woke.
const waitPoll = 200 * time.Millisecond

// beforeCall checks a model request against what is left of the run's
// token and cost limits before it is sent (children's slices included):
// it returns the end of the run when the request alone would pass one,
// and otherwise caps the request's output tokens at what is left, so
// that a call can pass a token limit only by Keel's estimate of its
// input being short of the provider's count. The estimate is corrected
// by the ratio of the provider's count to Keel's estimate of the
// previous request.
func (x *executor) beforeCall(req *model.Request, est int) *End {
	l, u := x.st.Limits, x.st.Used()
	stop := func(reason, msg string) *End {
		if x.st.Created.Parent != nil {
			reason, msg = ReasonBudgetExhausted, "the slice of its parent's budget is spent: "+msg
		}
		return &End{Type: journal.RunFailed, Reason: reason, Message: msg}
	}
	if x.st.estIn > 0 {
		// The provider counted the previous request differently from
		// Keel's estimate: correct by the same ratio.
		est = int((int64(est)*x.st.in + x.st.estIn - 1) / x.st.estIn)
	}
	// capOut lowers the request's output limit to n tokens: always when
	// it has one, and when it has none (the provider's default) only
	// below [safeOutputCap], which every model accepts.
	capOut := func(n int64) {
		n = max(1, n)
		if req.MaxOutputTokens > 0 && int64(req.MaxOutputTokens) > n || req.MaxOutputTokens == 0 && n <= safeOutputCap {
			req.MaxOutputTokens = int(n)
		}
	}
	if l.MaxTokens > 0 {
		left := l.MaxTokens - u.Tokens
		if int64(est) >= left {
			return stop(ReasonMaxTokens, fmt.Sprintf("token limit reached: the next request (about %d tokens) does not fit in the %d of %d tokens left", est, max(0, left), l.MaxTokens))
		}
		capOut(left - int64(est))
	}
	if l.MaxCost > 0 && x.p.Price != nil {
		left := l.MaxCost - u.Cost
		in := x.p.Price(model.Usage{InputTokens: int64(est)})
		perOut := x.p.Price(model.Usage{OutputTokens: 1_000_000}) / 1e6
		if in > left+1e-9 { // (sums of float prices)
			return stop(ReasonMaxCost, fmt.Sprintf("cost limit reached: the next request (about $%.4f before its answer) does not fit in the $%.4f of $%.4f left", in, max(0, left), l.MaxCost))
		}
		if perOut > 0 {
			capOut(int64((left - in) / perOut))
		}
	}
	return nil
}
