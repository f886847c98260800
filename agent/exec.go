package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

func (x *executor) since(start int64) int64 { return x.rt.clock().UnixMilli() - start }
func (x *executor) now() int64              { return x.rt.clock().UnixMilli() }

// recover repairs calls that were started and never finished: read-only
// and idempotent tools, and calls that asked a person for input, run
// again; the others get a result saying the outcome is unknown, so a
// non-idempotent action never runs twice unbeknown to the model.
func (x *executor) recover(ctx context.Context, ids []string) error {
	var rerun, unknown []string
	for _, id := range ids {
		info := x.toolInfo(x.st.call(id).Name)
		if info != nil && (info.Effect == tool.ReadOnly.String() || info.Idempotent) || x.st.hasInputs(id) {
			// A call that asked a person for input runs again: its
			// server asks the same question, which gets the journaled
			// answer (or waits for it).
			rerun = append(rerun, id)
			continue
		}
		unknown = append(unknown, id)
	}
	if err := x.closeCalls(ctx, unknown, "this call was interrupted: the runtime stopped while it ran, so its outcome is unknown (it may or may not have taken effect). Check the current state before repeating it."); err != nil {
		return err
	}
	if len(rerun) > 0 {
		// Tools run only after the snapshot taken before them is in.
		if err := x.settle(ctx); err != nil {
			return err
		}
		return x.runTools(ctx, rerun)
	}
	return nil
}

// closeCalls gives each call ids a synthetic error result with content,
// in one append: the one way a call that did not run (or whose outcome
// is unknown) gets its result, so that every call ends with exactly one.
func (x *executor) closeCalls(ctx context.Context, ids []string, content string) error {
	if len(ids) == 0 {
		return nil
	}
	types := make([]journal.Type, len(ids))
	payloads := make([]any, len(ids))
	for i, id := range ids {
		types[i] = journal.ToolFinished
		payloads[i] = &ToolFinished{CallID: id, Tool: x.st.call(id).Name, Synthetic: true, Result: tool.Result{IsError: true, Content: content}}
	}
	return x.appendMany(ctx, types, payloads)
}

// closeOpenCalls gives every unfinished call of the open turn a result
// saying it did not run because the run was stopped for why.
func (x *executor) closeOpenCalls(ctx context.Context, why string) error {
	t := x.st.LastTurn()
	if t == nil {
		return nil
	}
	var open []string
	for _, c := range t.Calls {
		if c.Finished == nil {
			open = append(open, c.ID)
		}
	}
	return x.closeCalls(ctx, open, "this call did not run: the run was stopped ("+why+")")
}

func (x *executor) toolInfo(name string) *ToolInfo {
	for i := range x.st.Created.Tools {
		if x.st.Created.Tools[i].Name == name {
			return &x.st.Created.Tools[i]
		}
	}
	return nil
}

// scope is what one call touches, for conflict detection.
type scope struct {
	whole bool // may touch the whole workspace
	write bool
	paths []string
}

func (a scope) conflicts(b scope) bool {
	if !a.write && !b.write {
		return false
	}
	if (a.whole && (b.whole || len(b.paths) > 0 || b.write)) || (b.whole && (len(a.paths) > 0 || a.write)) {
		return true
	}
	for _, p := range a.paths {
		for _, q := range b.paths {
			if overlaps(p, q) {
				return true
			}
		}
	}
	return false
}

func overlaps(p, q string) bool {
	if p == "." || q == "." || p == q {
		return true
	}
	return strings.HasPrefix(p, q+"/") || strings.HasPrefix(q, p+"/")
}

// runTools runs calls, concurrently where their scopes do not conflict:
// each call waits for every earlier call of the turn that conflicts with
// it, so mutations of one path apply in the order the model gave them.
func (x *executor) runTools(ctx context.Context, ids []string) error {
	type job struct {
		c     *Call
		sc    scope
		done  chan struct{}
		after []*job
	}
	jobs := make([]*job, len(ids))
	for i, id := range ids {
		c := x.st.call(id)
		j := &job{c: c, done: make(chan struct{})}
		if t := x.p.Tools.Tool(c.Name); t != nil && !teamTool(c.Name) {
			j.sc.write = t.Effect != tool.ReadOnly
			j.sc.whole = t.Scope == nil || t.Exclusive
		}
		if c.Decision != nil {
			j.sc.paths = c.Decision.Paths
		}
		for _, prev := range jobs[:i] {
			if prev.sc.conflicts(j.sc) {
				j.after = append(j.after, prev)
			}
		}
		jobs[i] = j
	}
	var g errgroup.Group
	g.SetLimit(x.p.Concurrency)
	var once sync.Once
	var firstErr error
	for _, j := range jobs {
		g.Go(func() error {
			defer close(j.done)
			for _, dep := range j.after {
				<-dep.done
			}
			if err := x.runOne(ctx, j.c); err != nil {
				once.Do(func() { firstErr = err })
				return err
			}
			return nil
		})
	}
	_ = g.Wait()
	return firstErr
}

// validated returns c's validated arguments: as the gate of this
// execution validated them if it did (the same tool and arguments), else
// validated now (a call gated before a resume).
func (x *executor) validated(c *Call) (json.RawMessage, *tool.Result) {
	x.mu.Lock()
	v, ok := x.valid[c.ID]
	delete(x.valid, c.ID)
	x.mu.Unlock()
	if ok && v.name == c.Name && v.raw == c.Arguments {
		return v.args, nil
	}
	return x.registry(c.Name).Validate(x.secrets.unseal(c.ToolCall))
}

func (x *executor) runOne(ctx context.Context, c *Call) error {
	if !x.mayRun(ctx) {
		return nil // the principal was revoked meanwhile: the loop pauses the run
	}
	args, res := x.validated(c)
	cr := x.st.Created
	x.mu.Lock()
	untrusted := x.st.Untrusted()
	x.mu.Unlock()
	req := &tool.Request{RunID: x.runID, CallID: c.ID, Arguments: args, Principal: cr.Principal, OnBehalfOf: cr.OnBehalfOf, MaxScopes: scopeBound(cr), Env: x.p.Env, Untrusted: untrusted}
	if c.Approval != nil && c.Resolved != nil && c.Resolved.Decision == policy.Allow && c.Resolved.By != ByTimeout {
		// What the person who approved the call saw (an MCP server's
		// files it may start with).
		req.Approved = c.Approval.State
	}
	if res == nil && ctx.Err() == nil {
		if ar := x.authorize(ctx, c, req); ar != nil {
			// A person must authorize first: the call waits, unstarted.
			return x.append(ctx, journal.AuthRequired, ar)
		}
	}
	// Under a tool-call limit, the check and the start are one step, so
	// that concurrent calls of a turn never pass it together.
	x.teamMu.Lock()
	x.mu.Lock()
	attempt := c.Attempts + 1
	l, used := x.st.Limits, x.st.Used()
	x.mu.Unlock()
	if res == nil && attempt == 1 {
		res = x.stale(c, req)
	}
	if attempt == 1 && l.MaxToolCalls > 0 && used.ToolCalls >= l.MaxToolCalls {
		x.teamMu.Unlock()
		return x.closeCalls(ctx, []string{c.ID}, fmt.Sprintf("this call did not run: the run's tool-call limit (%d, children's slices included) is reached", l.MaxToolCalls))
	}
	err := x.append(ctx, journal.ToolStarted, &ToolStarted{CallID: c.ID, Tool: c.Name, Arguments: args, Attempt: attempt})
	x.teamMu.Unlock()
	if err != nil {
		return err
	}
	start := x.now()
	if res == nil && teamTool(c.Name) && ctx.Err() == nil {
		switch c.Name {
		case SpawnTool:
			res = x.spawn(ctx, c, args)
		case HandoffTool:
			res = x.handoff(ctx, c, args)
		default:
			res = x.waitAgents(ctx, c, args)
		}
		if res == awaitChildren {
			return errAwaitChildren // the call stays open: the run pauses
		}
	}
	if res == nil {
		if ctx.Err() != nil {
			res = &tool.Result{IsError: true, Content: "this call did not run: the run was stopped"}
		} else {
			var err error
			// What a person watches of a running command holds no more
			// of the run's secrets than its result.
			tctx := ctx
			if x.secrets != nil {
				tctx = tool.WithLiveHidden(ctx, x.secrets.hide)
			}
			if x.p.Trace != nil {
				tctx = x.p.Trace(tctx, Operation{RunID: x.runID, CallID: c.ID, Seq: x.seq()})
			}
			res, err = x.p.Tools.Run(tctx, c.Name, req)
			if err != nil {
				// The runtime failed, not the tool: the model still gets a
				// result so the conversation stays valid.
				res = &tool.Result{IsError: true, Content: "the runtime could not run this call: " + err.Error()}
			}
			if res == nil {
				res = &tool.Result{IsError: true, Content: "the tool returned no result"}
			}
			if ctx.Err() != nil {
				res.IsError = true
				if errors.Is(context.Cause(ctx), ErrInterrupted) {
					res.Content += "\n[interrupted by the user while this call ran]"
				} else {
					res.Content += "\n[interrupted: the run was stopped while this call ran]"
				}
			}
		}
	}
	r := *res
	if !r.Untrusted && x.st.readsNetwork(c) {
		r.Untrusted = true // fetched from outside: untrusted input
	}
	r.Content = x.secrets.hide(r.Content)
	x.hideInArtifact(&r)
	x.boundResult(&r, c.ID)
	f := &ToolFinished{CallID: c.ID, Tool: c.Name, Result: r, DurationMS: x.since(start)}
	x.mu.Lock()
	f.Label = x.st.resultLabel(c, f)
	x.mu.Unlock()
	return x.append(ctx, journal.ToolFinished, f)
}

// stale returns the result of an approved call whose target changed
// since its approval was asked (ApprovalRequested.State): the person
// approved a change to what was there then, so the call does not run
// and the model is told to look again (a new call is decided, and asked,
// afresh). It returns nil when the call may run.
func (x *executor) stale(c *Call, req *tool.Request) *tool.Result {
	if c.Approval == nil || c.Approval.State == "" {
		return nil
	}
	t := x.p.Tools.Tool(c.Name)
	if t == nil {
		return nil
	}
	if t.State == nil {
		if !strings.HasPrefix(c.Approval.State, filesState) || x.approvedBefore(c) {
			return nil
		}
		return staleFiles(c.Approval.State, x.writtenState(c))
	}
	if x.approvedBefore(c) {
		return nil
	}
	now := t.State(req)
	if now == c.Approval.State {
		return nil
	}
	if strings.HasPrefix(c.Approval.State, "mcp-files:") {
		return &tool.Result{IsError: true, Content: "not called: the files its MCP server runs from the workspace changed after this call asked for approval, so the approval no longer applies to them. A new call is decided, and asked, afresh."}
	}
	var in struct {
		Path string `json:"path"`
	}
	_ = json.Unmarshal(req.Arguments, &in)
	what := "its target"
	if in.Path != "" {
		what = in.Path
	}
	how := "was changed"
	switch {
	case now == "absent":
		how = "was removed"
	case c.Approval.State == "absent":
		how = "was created"
	}
	return &tool.Result{IsError: true, Content: fmt.Sprintf("not done: %s %s after this call asked for approval (by a person or another program), so the approved change no longer applies to it. Read %s again and make the change anew; it will be decided, and asked, again with the new diff.", what, how, what)}
}

// approvedBefore reports whether another call of c's turn, approved with
// it, ran and may have written where c writes: the change since the
// approval was asked may then be the run's own, and cannot be told from
// a person's.
func (x *executor) approvedBefore(c *Call) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.st.LastTurn()
	if t == nil {
		return false
	}
	var mine []string
	if c.Decision != nil {
		mine = slices.Concat(c.Decision.Paths, x.writtenRel(c))
	}
	for _, o := range t.Calls {
		if o == c || o.Approval == nil || o.Started == nil {
			continue
		}
		ot := x.p.Tools.Tool(o.Name)
		if ot == nil || ot.Effect == tool.ReadOnly {
			continue
		}
		if ot.Scope == nil || o.Decision == nil {
			return true
		}
		for _, p := range o.Decision.Paths {
			for _, q := range mine {
				if overlaps(p, q) {
					return true
				}
			}
		}
	}
	return false
}

func (x *executor) maxChars() int {
	if x.p.Env.MaxResultChars > 0 {
		return x.p.Env.MaxResultChars
	}
	return tool.DefaultMaxResultChars
}

func (x *executor) callModel(ctx context.Context) error {
	req, est := x.request()
	if e := x.beforeCall(req, est); e != nil {
		return x.finish(ctx, e)
	}
	start := x.now()
	mctx := ctx
	if x.p.Trace != nil {
		mctx = x.p.Trace(ctx, Operation{RunID: x.runID, ModelCall: x.st.ModelCalls + 1, Seq: x.seq()})
	}
	resp, err := x.p.Model.Generate(mctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil // the loop records the stop
		}
		kind := model.KindOf(err)
		end := &RunEnded{Reason: ReasonModelError, Message: err.Error()}
		var me *model.Error
		if errors.As(err, &me) && me.RetryAfter > 0 {
			// The provider asked for a longer wait than the retries
			// make: say until when, so the run is resumed then.
			at := x.rt.clock().Add(me.RetryAfter).UTC().Truncate(time.Second)
			end.RetryAt = &at
			end.Message += "; it can be resumed after " + at.Format("2006-01-02 15:04:05 UTC")
		}
		return x.appendMany(ctx, []journal.Type{journal.ModelFailed, journal.RunFailed}, []any{
			&ModelFailed{Kind: kind.String(), Message: err.Error()},
			end,
		})
	}
	msg := resp.Message
	msg.Role = model.RoleAssistant
	msg.ToolCalls = normalizeIDs(msg.ToolCalls, x.st.Steps+1, x.usedID)
	if n := messageSize(&msg); n > MaxResponseBytes {
		return x.oversize(ctx, n)
	}
	usage := clampUsage(resp.Usage)
	estimated := false
	if usage.InputTokens == 0 && usage.OutputTokens == 0 {
		// The provider reported no usage: count Keel's own estimate, so
		// that totals and --max-tokens / --max-cost still work.
		usage = model.Usage{InputTokens: int64(est), OutputTokens: int64(estimateOutput(&msg, x.st.Family()))}
		estimated = true
	}
	var cost float64
	if x.p.Price != nil {
		cost = max(0, x.p.Price(usage))
	}
	return x.append(ctx, journal.ModelResponded, &ModelResponded{Message: msg, Usage: usage, Cost: cost,
		Model: resp.Model, ResponseID: resp.ID, StopReason: resp.StopReason, DurationMS: x.since(start),
		EstimatedInputTokens: int64(est), UsageEstimated: estimated, MemoryUsed: memoryUses(x.st, &msg)})
}

// estimateOutput returns Keel's estimate of the output tokens of msg
// for family f (the character-class estimate of [EstimateText]), for a
// provider that reports no usage.
func estimateOutput(msg *model.Message, f Family) int {
	return f.scale(estimateMessage(msg))
}

// oversize drops a model response of n bytes, over [MaxResponseBytes]: a
// response this large is a runaway or broken generation, and storing it
// would bloat the journal and every later request. The model is told
// (its response was not stored and nothing in it ran) and tries again;
// [DefaultMaxOversize] in a row stop the run.
func (x *executor) oversize(ctx context.Context, n int) error {
	m := fmt.Sprintf("the model's response is %d bytes, over the %d-byte limit; it was not stored and nothing in it ran", n, MaxResponseBytes)
	failed := &ModelFailed{Kind: model.KindInvalidRequest.String(), Message: m, ResponseBytes: int64(n)}
	if x.st.OversizeStreak()+1 >= DefaultMaxOversize {
		return x.appendMany(ctx, []journal.Type{journal.ModelFailed, journal.RunFailed}, []any{
			failed, &RunEnded{Reason: ReasonResponseTooLarge, Message: fmt.Sprintf("%s (%d responses in a row)", m, x.st.OversizeStreak()+1)},
		})
	}
	note := &UserMessage{Source: "keel.limit", Content: fmt.Sprintf("[Keel: your last response was %d bytes, over the limit of %d bytes for one response. It was not stored and nothing in it ran. Send smaller responses: write a large file in parts (create it, then append to it in several calls), or generate it with a short script. The run stops after %d such responses in a row.]", n, MaxResponseBytes, DefaultMaxOversize)}
	return x.appendMany(ctx, []journal.Type{journal.ModelFailed, journal.UserMessage}, []any{failed, note})
}

// cut gives each call of a response cut at the output-token limit a
// result saying that nothing ran ([CutResult]).
func (x *executor) cut(ctx context.Context, ids []string) error {
	return x.closeCalls(ctx, ids, CutResult)
}

// usedID reports whether a call of the run so far has that id (a
// lookup in the fold's turns: no set of every id is built per response).
func (x *executor) usedID(id string) bool { return x.st.call(id) != nil }

// normalizeIDs gives every call an id unique in the run: some
// OpenAI-compatible servers send none, or repeat them within a turn or
// in every turn ("call_0"). used reports the ids of earlier turns.
//
// An id that is not a short run of letters, digits, '_' and '-' (the
// charset Anthropic's tool_use ids allow) is replaced too: ids end up in
// URLs, file names (.keel/artifacts/RUN/ID.out) and approval forms
// (keel approve RUN CALL), where "B/../A" or "q?x#y" could name another
// call. So is an id in the replacements' namespace ("call_keel_...")
// that is not this very call's replacement, so that a replacement never
// meets a provider's id. The journal keeps the replacement, and every
// later request uses it consistently.
func normalizeIDs(calls []model.ToolCall, step int, used func(id string) bool) []model.ToolCall {
	seen := map[string]bool{}
	out := make([]model.ToolCall, len(calls))
	for i, c := range calls {
		repl := model.ReplacementCallID(step, i)
		if !safeID(c.ID) || seen[c.ID] || used(c.ID) || (strings.HasPrefix(c.ID, "call_keel_") && c.ID != repl) {
			c.ID = repl
		}
		seen[c.ID] = true
		out[i] = c
	}
	return out
}

func (x *executor) finish(ctx context.Context, e *End) error {
	if err := x.reap(ctx); err != nil {
		return err
	}
	out := e.Output
	if e.Reason == ReasonMarker && e.CallID != "" {
		// The model saw a bounded view; the run's output is the whole of
		// it, read back from the artifact.
		if c := x.st.call(e.CallID); c != nil && c.Finished.Artifact != "" {
			if b, err := tool.ReadArtifact(x.p.Env.Workspace, c.Finished.Artifact, maxRunOutput); err == nil {
				cut := len(b) > maxRunOutput
				full := strings.TrimLeft(string(b[:min(len(b), maxRunOutput)]), " \t\r\n")
				if _, rest, ok := strings.Cut(full, "\n"); ok {
					out = tool.Sanitize(rest)
					if cut {
						out += fmt.Sprintf("\n[… output cut at %d bytes; the whole output is in %s]\n", maxRunOutput, c.Finished.Artifact)
					}
				}
			}
		}
	}
	return x.append(ctx, e.Type, &RunEnded{Reason: e.Reason, Message: e.Message, Output: out})
}

// boundText keeps at most max bytes of s: the head and the tail, with a
// marker saying how much was elided. It is the runtime's safety net; tools
// bound their own output first.
func boundText(s string, max int) string {
	if len(s) <= max || max <= 0 {
		return s
	}
	head, tail := max/2, max/2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	start := len(s) - tail
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return fmt.Sprintf("%s\n[… %d bytes elided …]\n%s", s[:head], start-head, s[start:])
}

// maxRunOutput bounds the run's output read back from an artifact (it
// is journaled in run.completed).
const maxRunOutput = 1 << 20

// MaxResponseBytes bounds one model response (text plus tool-call
// arguments): 4 MiB, far above any real completion.
const MaxResponseBytes = 4 << 20

func messageSize(m *model.Message) int {
	n := len(m.Content)
	for _, c := range m.ToolCalls {
		n += len(c.ID) + len(c.Name) + len(c.Arguments)
	}
	return n
}

// clampUsage replaces negative token counts (a broken or hostile endpoint)
// by 0, so that budgets can only grow.
func clampUsage(u model.Usage) model.Usage {
	u.InputTokens = max(0, u.InputTokens)
	u.OutputTokens = max(0, u.OutputTokens)
	u.CachedInputTokens = max(0, min(u.CachedInputTokens, u.InputTokens))
	u.CacheWriteTokens = max(0, min(u.CacheWriteTokens, u.InputTokens))
	return u
}

// safeID reports whether id is 1 to 64 characters of [A-Za-z0-9_-].
func safeID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}
