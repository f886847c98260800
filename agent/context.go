package agent

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
)

// The model request is a view over the journal (docs/context.md): the
// system prompt and memory, the tool schemas, the task, the summary of
// compacted turns (with the plan), and the turns since. When the view's
// estimate passes the threshold, the step function returns ActCompact;
// the executor has the model summarise the oldest turns and journals
// context.compacted, after which those turns leave the view. The
// workspace and the journal keep everything.

// Defaults of [ContextConfig].
const (
	// DefaultCompactThreshold is the fraction of the window at which a
	// run compacts.
	DefaultCompactThreshold = 0.8
	// DefaultKeepRecent is the fraction of the window kept verbatim
	// (the newest turns) when a run compacts.
	DefaultKeepRecent = 0.25
	// DefaultNotesFile is the workspace file whose content a handoff
	// carries into the fresh context.
	DefaultNotesFile = ".keel-notes.md"
	// maxNotesBytes bounds the notes a handoff carries.
	maxNotesBytes = 8 << 10
)

// ContextConfig configures a run's context window and compaction. It is
// fixed in run.created (a resume may replace Window, see
// [RunResumed].ContextWindow), so that the step function's decisions
// replay.
type ContextConfig struct {
	// Window is the model's context window in tokens; 0 disables
	// compaction.
	Window int `json:"window,omitempty"`
	// Threshold is the fraction of Window at which the run compacts;
	// 0 means [DefaultCompactThreshold].
	Threshold float64 `json:"threshold,omitempty"`
	// Family names the model family whose token estimate applies (see
	// [LookupFamily]); "" means [GenericFamily].
	Family string `json:"family,omitempty"`
	// KeepRecent is the fraction of Window kept verbatim after a
	// compaction (the newest turns); 0 means [DefaultKeepRecent].
	KeepRecent float64 `json:"keep_recent,omitempty"`
	// SummaryTokens bounds the summary's length in tokens; 0 means
	// Window/8, at most 2,000.
	SummaryTokens int `json:"summary_tokens,omitempty"`
	// HandoffAfter makes every HandoffAfter-th compaction a handoff (a
	// fresh context from the summary, the plan and the workspace notes);
	// 0 means never.
	HandoffAfter int `json:"handoff_after,omitempty"`
	// NotesFile is the workspace-relative notes file a handoff carries;
	// "" means [DefaultNotesFile].
	NotesFile string `json:"notes_file,omitempty"`
}

// ContextCompacted is the payload of journal.ContextCompacted: turns
// [From, To) of State.Messages left the view, replaced by Summary.
// Summary covers everything before To (it includes the previous
// summary), so the view holds only the newest one.
type ContextCompacted struct {
	// From and To delimit the messages compacted by this event (indexes
	// into State.Messages; message 0, the task, always stays). From is
	// where the previous compaction stopped.
	From int `json:"from"`
	To   int `json:"to"`
	// FirstStep and LastStep number the assistant turns (steps, from 1)
	// the range holds; 0 when it holds none.
	FirstStep int `json:"first_step,omitempty"`
	LastStep  int `json:"last_step,omitempty"`
	// Summary replaces the compacted turns in the view.
	Summary string `json:"summary"`
	// Mechanical is set when Keel wrote Summary itself because the model
	// could not (see Attempts); such a summary lists the calls and their
	// outcomes.
	Mechanical bool `json:"mechanical,omitempty"`
	// Handoff marks a fresh context: every turn left the view (an
	// automatic handoff keeps a newest turn the model has not answered),
	// and Notes (the workspace's NotesFile) joined the summary.
	Handoff   bool   `json:"handoff,omitempty"`
	Notes     string `json:"notes,omitempty"`
	NotesFile string `json:"notes_file,omitempty"`
	// Plan is the plan (todo list) when the compaction happened; the
	// view shows it with the summary.
	Plan []PlanItem `json:"plan,omitempty"`
	// Reason is "threshold" (the estimate passed it), "handoff" (the
	// automatic handoff after ContextConfig.HandoffAfter compactions) or
	// "requested" (keel runs handoff).
	Reason string `json:"reason"`
	// TokensBefore and TokensAfter estimate the next request sent (the
	// view fitted to the window, see [BuildRequest]) before and after;
	// Window is the window they were measured against. ViewTokensBefore
	// and ViewTokensAfter estimate the view before fitting (whole tool
	// results), which may be far larger than the window; zero in events
	// journaled before they were recorded.
	TokensBefore     int `json:"tokens_before"`
	TokensAfter      int `json:"tokens_after"`
	ViewTokensBefore int `json:"view_tokens_before,omitempty"`
	ViewTokensAfter  int `json:"view_tokens_after,omitempty"`
	Window           int `json:"window"`
	// Carried marks a handoff whose Summary carries the compacted turns
	// as they were (as text), because they were shorter than any
	// summary of them; such a handoff may still grow the request by its
	// header, notes and plan.
	Carried bool `json:"carried,omitempty"`
	// Attempts lists failed summary requests, in order.
	Attempts []SummaryAttempt `json:"attempts,omitempty"`
	// Usage and Cost sum every summary call of this compaction, the
	// failed attempts included (each also in its attempt): every call a
	// provider reports usage for is paid, so the run's totals and limits
	// count it. Model and DurationMS describe the calls (zero when none
	// was made).
	Usage      model.Usage `json:"usage"`
	Cost       float64     `json:"cost,omitempty"`
	Model      string      `json:"model,omitempty"`
	DurationMS int64       `json:"duration_ms"`
}

// SummaryAttempt is one failed request for a summary.
type SummaryAttempt struct {
	// Kind is the model error kind ("context_overflow"), "empty" (no
	// text), "tool_call" (a tool call instead of text) or "no_gain" (a
	// summary that would not shrink the view).
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// BudgetTokens is the input budget the request was built for.
	BudgetTokens int `json:"budget_tokens"`
	// Usage and Cost are what the provider reported for the call (nil
	// and 0 when it reported none); they are part of the event's Usage
	// and Cost.
	Usage *model.Usage `json:"usage,omitempty"`
	Cost  float64      `json:"cost,omitempty"`
}

// Compaction is the step function's decision to compact (ActCompact).
type Compaction struct {
	// From and To delimit the messages to compact, as in
	// [ContextCompacted].
	From, To int
	Handoff  bool
	// Reason is as in [ContextCompacted].
	Reason string
	// Estimate is the estimated tokens of the next request sent now (the
	// view fitted to the window for the default output reserve).
	Estimate int
}

// contextState is the part of [State] the context builder folds.
type contextState struct {
	// viewStart is the first message of State.Messages shown verbatim
	// (after the task); messages [1, viewStart) are summarised.
	viewStart int
	// compactions are the context.compacted events, in order.
	compactions []*ContextCompacted
	// sinceHandoff counts compactions since the last handoff.
	sinceHandoff int
	// window overrides ContextConfig.Window when positive.
	window int
	// handoffRequested is set by a run.resumed asking for a handoff.
	handoffRequested bool
	// plan is the newest plan (see [State.Plan]), set by the call
	// planCall.
	plan     []PlanItem
	planCall string
	// pieces[i] is the estimate, in pieces (see [EstimateText]), of
	// s.Messages[i] as the view renders it, with its tool results; kept
	// up to date by applyContext so that the step function's estimate is
	// a sum.
	pieces []int
	// prefixPieces is the estimate of the system prompt and tools.
	prefixPieces int
	healthState
}

// Compactions returns the run's context.compacted payloads, oldest
// first. The slice is shared; do not modify it.
func (s *State) Compactions() []*ContextCompacted { return s.ctx.compactions }

// ViewStart returns the index in s.Messages of the first message the
// model still sees verbatim after the task (1 when nothing was
// compacted).
func (s *State) ViewStart() int {
	if s.ctx.viewStart == 0 {
		return 1
	}
	return s.ctx.viewStart
}

// ContextWindow returns the run's effective context window in tokens (0:
// no compaction).
func (s *State) ContextWindow() int {
	if s.ctx.window > 0 {
		return s.ctx.window
	}
	if c := s.Created.Context; c != nil {
		return c.Window
	}
	return 0
}

// Family returns the model family whose token estimate the run uses.
func (s *State) Family() Family {
	if c := s.Created.Context; c != nil && c.Family != "" {
		return familyByName(c.Family)
	}
	return LookupFamily(s.Created.Model)
}

func (s *State) contextConfig() ContextConfig {
	var c ContextConfig
	if s.Created.Context != nil {
		c = *s.Created.Context
	}
	c.Window = s.ContextWindow()
	if c.Threshold <= 0 || c.Threshold > 1 {
		c.Threshold = DefaultCompactThreshold
	}
	if c.KeepRecent <= 0 || c.KeepRecent >= 1 {
		c.KeepRecent = DefaultKeepRecent
	}
	if c.SummaryTokens <= 0 {
		c.SummaryTokens = min(2000, max(c.Window/8, 64))
	}
	if c.NotesFile == "" {
		c.NotesFile = DefaultNotesFile
	}
	return c
}

// applyContext folds the context-related parts of an event: compactions,
// window overrides and handoff requests, the plan, and loop health. It
// runs after [State.Apply]'s own handling of the event.
func (s *State) applyContext(e *journal.Event, v any) error {
	bad := func(format string, args ...any) error {
		return &journal.CorruptError{RunID: s.RunID, Seq: e.Seq, Reason: fmt.Sprintf(format, args...)}
	}
	if e.Type == journal.RunCreated {
		s.ctx.prefixPieces = perRequestPieces + EstimateText(systemPrompt(s.Created)) + estimateTools(toolSpecs(s.Created))
	}
	for len(s.ctx.pieces) < len(s.Messages) {
		m := s.Messages[len(s.ctx.pieces)]
		if t := s.LastTurn(); t != nil && t.Index == len(s.ctx.pieces) {
			m.ToolCalls = t.sentCalls(&m)
		} else {
			m.ToolCalls = sanitizeCalls(m.ToolCalls)
		}
		s.ctx.pieces = append(s.ctx.pieces, estimateMessage(&m))
	}
	switch p := v.(type) {
	case *ContextCompacted:
		if t := s.LastTurn(); t != nil && !allDone(t) {
			return bad("context.compacted while a tool call has no result")
		}
		if p.From != s.ViewStart() || p.To <= p.From || p.To > len(s.Messages) {
			return bad("context.compacted range [%d, %d) does not continue the view at %d of %d messages", p.From, p.To, s.ViewStart(), len(s.Messages))
		}
		if p.To > answeredEnd(s) {
			// The newest turn left the view before the model saw its
			// results (a requested handoff): the model's next calls
			// cannot repeat "the same call with the same result".
			s.ctx.forgetRepeats()
		}
		s.ctx.viewStart = p.To
		s.ctx.compactions = append(s.ctx.compactions, p)
		s.ctx.sinceHandoff++
		if p.Handoff {
			s.ctx.sinceHandoff = 0
			s.ctx.handoffRequested = false
		}
		s.Usage = s.Usage.Add(p.Usage)
		s.Cost += p.Cost
	case *RunResumed:
		if p.ContextWindow > 0 {
			s.ctx.window = p.ContextWindow
		}
		if p.Handoff {
			s.ctx.handoffRequested = true
		}
	case *ModelResponded:
		s.noteResponse(&p.Message)
	case *ToolFinished:
		if t := s.turnOf(p.CallID); t != nil && t.Index < len(s.ctx.pieces) {
			s.ctx.pieces[t.Index] += perMessagePieces + EstimateText(p.Content)
		}
		s.notePlan(p)
		s.noteTurnDone()
	}
	return nil
}

// forgetRepeats restarts loop health's count of repeated turns (see
// [State.RepeatStreak]): the turns before now no longer count.
func (c *contextState) forgetRepeats() {
	h := &c.healthState
	h.repeatStreak, h.repeatPeriod, h.sigs, h.runs, h.grew = 0, 0, nil, [maxPeriod + 1]int{}, false
}

// turnOf returns the newest turn with a call of that id.
func (s *State) turnOf(id string) *Turn {
	for i := len(s.Turns) - 1; i >= 0; i-- {
		for _, c := range s.Turns[i].Calls {
			if c.ID == id {
				return s.Turns[i]
			}
		}
	}
	return nil
}

// NextRequestTokens returns the estimated prompt tokens of the next
// request before any trimming: the step function compares it with the
// compaction threshold. It is a sum of per-message estimates folded with
// the journal.
func (s *State) NextRequestTokens() int { return estimateView(s) }

// systemPrompt returns the system prompt of every request: the run's
// system prompt, then its memory files.
func systemPrompt(c *RunCreated) string {
	var parts []string
	for _, p := range []string{c.System, c.Memory, c.Skills.Section(), c.Recall.render()} {
		if strings.TrimSpace(p) != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "\n\n")
}

func toolSpecs(c *RunCreated) []model.ToolSpec {
	tools := make([]model.ToolSpec, len(c.Tools))
	for i, t := range c.Tools {
		tools[i] = t.ToolSpec
	}
	return tools
}

// BuildRequest returns the model request for the next turn of s, a view
// over its journal: the system prompt with memory, the tools sorted by
// name (this prefix stays the same between steps, so provider prompt
// caching applies), the task, the newest compaction summary with the
// plan, and the turns since. When the estimate still exceeds the window
// (less a reserve for the answer), the request is fitted, never the
// journal: older tool results and texts are trimmed first, and each
// result of the newest turn, which the model has not seen yet, is
// bounded to its share of the room left, naming the file with the whole
// result (its artifact, or the one the executor saves for it: see
// [ResultArtifact]). PriorTurns counts the compacted assistant turns.
func BuildRequest(s *State, maxOutput int) *model.Request {
	req, _, _ := fittedRequest(s, maxOutput, nil)
	return req
}

// fittedRequest is BuildRequest, also returning the request's estimate
// and the calls of the newest turn whose results it cut and that have
// no artifact yet: the executor saves them before it sends the request.
// canSave says whether a call's result can be saved; nil means every
// one can. A cut result that cannot be saved names no file.
func fittedRequest(s *State, maxOutput int, canSave func(id string) bool) (*model.Request, int, []*Call) {
	req := &model.Request{System: systemPrompt(s.Created), Tools: toolSpecs(s.Created), MaxOutputTokens: maxOutput}
	var pins []bool
	req.Messages, pins, req.PriorTurns = viewMessages(s)
	est, save := fitView(s, req, pins, estimateView(s), maxOutput, canSave)
	return req, est, save
}

// fitView fits req, a view of s whose estimate is est, into the window
// as [BuildRequest] does, and returns its estimate and the calls of the
// newest turn whose results it cut and that have no artifact yet.
//
// pins marks the messages of req that fitting keeps whole: the task and
// the person's messages.
func fitView(s *State, req *model.Request, pins []bool, est, maxOutput int, canSave func(id string) bool) (int, []*Call) {
	w := s.ContextWindow()
	if w <= 0 || est <= w-outputReserve(w, maxOutput) {
		return est, nil
	}
	fx := &fitting{artifacts: map[string]string{}, planCall: s.ctx.planCall}
	if p := s.Plan(); p != nil {
		fx.plan = RenderPlan(p)
	}
	byID := map[string]*Call{}
	last := s.LastTurn()
	// Older results name their artifact when fitting clips them (the
	// marker of a bounded output, in its middle, would be clipped away).
	for _, t := range s.Turns {
		for _, c := range t.Calls {
			if t != last && c.Finished != nil && c.Finished.Artifact != "" {
				fx.artifacts[c.ID] = c.Finished.Artifact
			}
		}
	}
	if last != nil {
		for _, c := range last.Calls {
			switch {
			case c.Finished == nil:
			case c.Finished.Artifact != "":
				fx.artifacts[c.ID] = c.Finished.Artifact
			case canSave == nil || canSave(c.ID):
				fx.artifacts[c.ID] = s.ResultArtifact(c.ID)
				byID[c.ID] = c
			default:
				delete(fx.artifacts, c.ID)
			}
		}
	}
	var save []*Call
	for _, id := range fitRequest(req, pins, s.Family(), w-outputReserve(w, maxOutput), fx) {
		if c := byID[id]; c != nil {
			save = append(save, c)
		}
	}
	return EstimateRequest(req, s.Family()), save
}

// sentTokens returns the estimate of the request the next model call
// sends as the view stands: fitted into the window (see [BuildRequest])
// for an answer of at most maxOutput tokens (0: the default reserve).
func sentTokens(s *State, maxOutput int) int {
	_, est, _ := fittedRequest(s, maxOutput, nil)
	return est
}

// sentTokensAfter returns the estimate of the request the next model
// call would send once ev is folded, fitted as [sentTokens] does.
func sentTokensAfter(s *State, ev *ContextCompacted, maxOutput int) int {
	req := &model.Request{System: systemPrompt(s.Created), Tools: toolSpecs(s.Created), MaxOutputTokens: maxOutput}
	var pins []bool
	req.Messages, pins = viewHead(s, ev.To, summaryMessage(ev))
	req.Messages, pins = appendConversation(req.Messages, pins, s, ev.To)
	est, _ := fitView(s, req, pins, EstimateRequest(req, s.Family()), maxOutput, nil)
	return est
}

// ResultArtifact returns the workspace-relative file in which the whole
// result of call callID of run runID is saved when the run has no state
// directory: the artifact path [tool.Output] uses, .keel/artifacts/RUN/CALL.out.
func ResultArtifact(runID, callID string) string {
	return path.Join(tool.ArtifactDir, tool.SafeName(runID, "run"), tool.SafeName(callID, "call")+".out")
}

// ResultArtifact returns the file in which the whole result of call
// callID is saved, as [tool.Output] names it: in the run's state
// directory (RunCreated.StateDir), or as the package-level
// [ResultArtifact] for a run without one.
func (s *State) ResultArtifact(callID string) string {
	if d := s.Created.StateDir; d != "" {
		return path.Join(d, tool.StateArtifacts, tool.SafeName(s.RunID, "run"), tool.SafeName(callID, "call")+".out")
	}
	return ResultArtifact(s.RunID, callID)
}

// outputReserve is the part of the window kept free for the answer.
func outputReserve(window, maxOutput int) int {
	if maxOutput > 0 && maxOutput < window/2 {
		return maxOutput
	}
	return min(window/10, 8192)
}

// viewMessages returns the messages of the view, which of them fitting
// keeps whole (see [fitView]), and the number of assistant turns
// compacted out of it.
func viewMessages(s *State) ([]model.Message, []bool, int) {
	start := s.ViewStart()
	prior, summary := 0, ""
	if n := len(s.ctx.compactions); n > 0 {
		for _, m := range s.Messages[1:min(start, len(s.Messages))] {
			if m.Role == model.RoleAssistant {
				prior++
			}
		}
		summary = summaryMessage(s.ctx.compactions[n-1])
	}
	out, pins := viewHead(s, start, summary)
	out, pins = appendConversation(out, pins, s, start)
	return out, pins, prior
}

// viewHead returns the fixed head of a view whose verbatim part starts
// at message start: the task, the messages a person sent before start
// (verbatim, like the task: compaction never takes them out of the
// view), then summary unless it is empty; and the pins of those
// messages (see [fitView]).
func viewHead(s *State, start int, summary string) ([]model.Message, []bool) {
	out := make([]model.Message, 0, 2+2*(len(s.Messages)-start))
	pins := make([]bool, 0, cap(out))
	out, pins = append(out, s.Messages[0]), append(pins, true)
	for _, i := range s.person {
		if i >= start {
			break
		}
		out, pins = append(out, s.Messages[i]), append(pins, true)
	}
	if summary != "" {
		out, pins = append(out, model.Message{Role: model.RoleUser, Content: summary}), append(pins, false)
	}
	return out, pins
}

// personPieces returns the estimate, in pieces, of the messages a person
// sent in [from, to): those a compaction of that range keeps in the view.
func (s *State) personPieces(from, to int) int {
	n := 0
	for _, i := range s.person {
		if i >= from && i < to && i < len(s.ctx.pieces) {
			n += s.ctx.pieces[i]
		}
	}
	return n
}

// isPerson reports whether s.Messages[i] is a person's message after the
// task.
func (s *State) isPerson(i int) bool {
	_, ok := slices.BinarySearch(s.person, i)
	return ok
}

// appendConversation appends s.Messages[start:] to out as
// [State.Conversation] renders them: each turn followed by its results;
// pins, parallel to out, is extended to mark the person's messages.
func appendConversation(out []model.Message, pins []bool, s *State, start int) ([]model.Message, []bool) {
	ti := 0
	for ti < len(s.Turns) && s.Turns[ti].Index < start {
		ti++
	}
	for i := start; i < len(s.Messages); i++ {
		m := s.Messages[i]
		if ti < len(s.Turns) && s.Turns[ti].Index == i {
			t := s.Turns[ti]
			ti++
			m.ToolCalls = t.sentCalls(&m)
			out, pins = append(out, m), append(pins, false)
			for _, c := range t.Calls {
				if c.Finished == nil {
					continue
				}
				out = append(out, model.Message{Role: model.RoleTool, ToolCallID: c.ID, Content: c.Finished.Content, IsError: c.Finished.IsError})
				pins = append(pins, false)
			}
			continue
		}
		out, pins = append(out, m), append(pins, s.isPerson(i))
	}
	return out, pins
}

// summaryMessage renders a compaction for the view.
func summaryMessage(c *ContextCompacted) string {
	var b strings.Builder
	switch {
	case c.Handoff && c.Carried:
		b.WriteString("[Keel: handoff. You continue this task in a fresh context. Everything before this message is below, as text (it was shorter than a summary); ")
	case c.Handoff:
		b.WriteString("[Keel: handoff. You continue this task in a fresh context. Everything before this message was replaced by the summary below; ")
	default:
		b.WriteString("[Keel: context compacted. Earlier turns were replaced by the summary below; ")
	}
	if c.LastStep > 0 {
		fmt.Fprintf(&b, "it covers steps 1–%d. ", c.LastStep)
	}
	b.WriteString("The workspace still holds all their changes, and long outputs remain in the files their results named.]\n\n")
	b.WriteString(strings.TrimSpace(c.Summary))
	if c.Notes != "" {
		fmt.Fprintf(&b, "\n\nYour notes (%s):\n%s", c.NotesFile, strings.TrimSpace(c.Notes))
	}
	if len(c.Plan) > 0 {
		b.WriteString("\n\nPlan (todo) at that point:\n")
		b.WriteString(RenderPlan(c.Plan))
	}
	return b.String()
}
