package agent

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/keel-run/keel/model"
)

// contextAction decides whether the run compacts before its next model
// call: when a handoff was requested, or when the estimate of the next
// request passes the threshold and there is something to compact.
//
// Only messages the model has answered leave the view: those before its
// newest assistant message (answeredEnd). The newest turn and its
// results, which the model has not seen yet, always reach it at least
// once, fitted into the request when they do not fit (fitRequest).
//
// It never returns a compaction that does not move the view forward, so
// compaction cannot loop: each one consumes at least one message. Nor
// does it return one (other than a handoff) whose saving is tiny
// (worthCompacting): then it compacts everything the model has
// answered instead, or, if that cannot save enough either, nothing (the
// request is then fitted). The saving is measured on what is sent: the
// fitted request now against the fitted request after the compaction,
// with a summary of its budgeted size. (With large tool results the
// view may be far over the window while the fitted request already
// clips the older results; compacting them then shrinks the view but
// not the request, and a summary call would be paid for nothing.)
func contextAction(s *State) (Action, bool) {
	cfg := s.contextConfig()
	from, n := s.ViewStart(), len(s.Messages)
	if s.ctx.handoffRequested && from < n {
		return Action{Kind: ActCompact, Compact: &Compaction{From: from, To: n, Handoff: true, Reason: "requested", Estimate: sentTokens(s, 0)}}, true
	}
	if cfg.Window <= 0 || from >= n {
		return Action{}, false
	}
	est := estimateView(s)
	if float64(est) <= cfg.Threshold*float64(cfg.Window) {
		return Action{}, false
	}
	end := answeredEnd(s)
	if end <= from {
		return Action{}, false
	}
	c := &Compaction{From: from, Reason: "threshold"}
	if cfg.HandoffAfter > 0 && s.ctx.sinceHandoff >= cfg.HandoffAfter {
		c.To, c.Handoff, c.Reason = end, true, "handoff"
	} else {
		c.To = chooseBoundary(s, from, end, keepBudget(s, cfg))
	}
	if c.To <= from {
		return Action{}, false
	}
	c.Estimate = sentTokens(s, 0)
	if !c.Handoff && !worthCompacting(s, c.From, c.To, c.Estimate) {
		if c.To >= end || !worthCompacting(s, c.From, end, c.Estimate) {
			return Action{}, false
		}
		c.To = end
	}
	return Action{Kind: ActCompact, Compact: c}, true
}

// answeredEnd returns the index in s.Messages of the newest assistant
// message (0 when there is none): the messages before it are the ones
// the model has answered, the only ones a compaction may take out of
// the view. The newest turn's results, and any message after them, the
// model has not seen yet.
func answeredEnd(s *State) int {
	for i := len(s.Messages) - 1; i > 0; i-- {
		if s.Messages[i].Role == model.RoleAssistant {
			return i
		}
	}
	return 0
}

// minGain is the least a compaction must save, in pieces, for its
// estimate in tokens to drop after the family's rounding.
const minGain = 8

// minCompactionGain returns the least a compaction must be able to save,
// in tokens, for a run with this window to make one: a 32nd of the
// window, at least 128 tokens. Below it the compaction (and the summary
// call it may pay for) changes nearly nothing; the request is fitted
// instead. The report behind it: a compaction of one short message
// that took a paid summary call to go from 35,808 to 35,728 tokens of
// a 32,768-token window.
func minCompactionGain(window int) int { return max(2*minSummaryTokens, window/32) }

// replacedPieces returns the pieces a compaction of messages [from, to)
// takes out of the view: those messages with their results, and the
// previous summary.
func replacedPieces(s *State, from, to int) int {
	n := 0
	for _, p := range s.ctx.pieces[from:min(to, len(s.ctx.pieces))] {
		n += p
	}
	n -= s.personPieces(from, to) // they stay
	if k := len(s.ctx.compactions); k > 0 {
		n += perMessagePieces + EstimateText(summaryMessage(s.ctx.compactions[k-1]))
	}
	return n
}

// shrinkPieces returns how many pieces compacting messages [from, to)
// saves at most: what it replaces less Keel's shortest summary, with
// the plan.
func shrinkPieces(s *State, from, to int) int {
	first, last := stepRange(s, from, to)
	least := perMessagePieces + EstimateText(summaryMessage(&ContextCompacted{Summary: minimalSummary(first, last), FirstStep: first, LastStep: last, Plan: s.Plan()}))
	return replacedPieces(s, from, to) - least
}

// worthCompacting reports whether compacting messages [from, to) can
// shrink the view, and the request sent (sent tokens now: see
// [sentTokens]), by at least minCompactionGain tokens. The view's
// saving, a sum, is checked first; the request's is the estimate of the
// fitted request after the compaction with a summary of the size the
// executor budgets for it ([budgetedSummary]).
func worthCompacting(s *State, from, to, sent int) bool {
	g := shrinkPieces(s, from, to)
	least := minCompactionGain(s.ContextWindow())
	if g < minGain || s.Family().scale(g) < least {
		return false
	}
	first, last := stepRange(s, from, to)
	ev := &ContextCompacted{From: from, To: to, FirstStep: first, LastStep: last, Plan: s.Plan(), Summary: budgetedSummary(s, from, to)}
	return sent-sentTokensAfter(s, ev, 0) >= least
}

// summaryTokens returns the most tokens the summary of a compaction of
// messages [from, to) may take: the run's summary budget, at most half
// of what it replaces (a summary worth a paid call is much smaller than
// what it replaces; see [executor.compact]).
func summaryTokens(s *State, from, to int) int {
	return min(s.contextConfig().SummaryTokens, s.Family().scale(replacedPieces(s, from, to))/2)
}

// budgetedSummary returns a stand-in for the summary of a compaction of
// messages [from, to) as large as the executor allows it to be
// ([summaryTokens]), and at least Keel's shortest summary, the one a
// compaction falls back to last: the step function measures a
// compaction's saving with it.
func budgetedSummary(s *State, from, to int) string {
	first, last := stepRange(s, from, to)
	least := minimalSummary(first, last)
	// Each "words " is one piece (see EstimateText).
	scale := s.Family().Scale
	if scale <= 0 {
		scale = 1
	}
	pieces := int(float64(summaryTokens(s, from, to)) / scale)
	if pieces <= EstimateText(least) {
		return least
	}
	return strings.Repeat("words ", pieces)
}

// lowWater is the fraction of the threshold a compaction aims to bring
// the next request under, so that a run does not compact again at once.
const lowWater = 0.6

// keepBudget returns the tokens of recent turns a compaction keeps:
// KeepRecent of the window, less if the fixed part of the view (prefix,
// task and a summary) leaves no room for that under the low-water mark.
func keepBudget(s *State, cfg ContextConfig) int {
	base := EstimateRequest(&model.Request{System: systemPrompt(s.Created), Tools: toolSpecs(s.Created), Messages: s.Messages[:1]}, s.Family()) + cfg.SummaryTokens
	room := int(lowWater*cfg.Threshold*float64(cfg.Window)) - base
	return max(0, min(int(cfg.KeepRecent*float64(cfg.Window)), room))
}

// estimateView returns the estimated tokens of the next request before
// any fitting: the folded per-message estimates of the view, so it costs
// a sum, not a pass over the conversation. It equals EstimateRequest of
// the untrimmed request.
func estimateView(s *State) int {
	n := s.ctx.prefixPieces
	start := s.ViewStart()
	if len(s.ctx.pieces) > 0 {
		n += s.ctx.pieces[0]
	}
	n += s.personPieces(1, start)
	if k := len(s.ctx.compactions); k > 0 {
		n += perMessagePieces + EstimateText(summaryMessage(s.ctx.compactions[k-1]))
	}
	for _, p := range s.ctx.pieces[min(start, len(s.ctx.pieces)):] {
		n += p
	}
	return s.Family().scale(n)
}

// chooseBoundary returns the smallest message index to in (from, end]
// such that messages [to, n) with their results fit in keep tokens; end
// is answeredEnd, so the newest turn always stays. When even the
// messages from end on do not fit, it compacts everything before end.
func chooseBoundary(s *State, from, end, keep int) int {
	f := s.Family()
	tail := 0
	for _, p := range s.ctx.pieces[end:] {
		tail += f.scale(p)
	}
	to := end
	for i := end - 1; i > from && tail <= keep; i-- {
		tail += f.scale(s.ctx.pieces[i])
		if tail > keep {
			break
		}
		to = i
	}
	return to
}

// fitting is what [fitRequest] needs to know of the run beyond the
// request.
type fitting struct {
	// artifacts[id] names the file holding the whole result of call id:
	// for the newest turn's calls, their artifact or the file the
	// executor saves a cut result in; for older calls, their artifact.
	artifacts map[string]string
	// planCall is the call that set the run's plan, and plan its
	// rendering ("" when the run has none): when fitting leaves that
	// call out, the plan is shown in its place, as a compaction's
	// summary shows it.
	planCall, plan string
}

// maxPlanArgs is the longest plan call fitting keeps whole.
const maxPlanArgs = 2000

// fitRequest trims req's messages, in passes of increasing severity,
// until its estimate is at most budget tokens, and returns the call ids
// of the newest turn's results it cut. The newest turn's results are
// the ones the model has not seen, so they give way last: first older
// tool results and assistant texts are clipped (1,000 and 500
// characters); then each result of the newest turn is bounded to its
// share of the room left (fitNewest), with a note naming the file that
// holds the whole result (fx.artifacts[call id], when there is one);
// then older messages are clipped harder (300 characters), then whole
// older turns are left out from the oldest (their count is added to
// PriorTurns; the note saying so shows the plan when the plan's call
// is among them), and last the other messages after the task are
// clipped. A clipped older result names its artifact. The task and the
// messages pins marks (a person's, parallel to req.Messages; nil marks
// none) are never trimmed nor left out, nor is the plan's call when it
// is short. It is deterministic.
func fitRequest(req *model.Request, pins []bool, f Family, budget int, fx *fitting) []string {
	if fx == nil {
		fx = &fitting{}
	}
	artifacts := fx.artifacts
	if EstimateRequest(req, f) <= budget {
		return nil
	}
	req.Messages = append([]model.Message(nil), req.Messages...)
	pins = append([]bool(nil), pins...)
	for len(pins) < len(req.Messages) {
		pins = append(pins, false)
	}
	// The newest turn's results, whole, to fit again after each pass.
	var newest []newestResult
	for i := lastAssistant(req.Messages) + 1; i < len(req.Messages); i++ {
		if m := req.Messages[i]; m.Role == model.RoleTool {
			newest = append(newest, newestResult{id: m.ToolCallID, content: m.Content, artifact: artifacts[m.ToolCallID]})
		}
	}
	clipOlder := func(toolMax, textMax int) {
		msgs := req.Messages
		last := lastAssistant(msgs)
		for i := 1; i < last; i++ {
			switch msgs[i].Role {
			case model.RoleTool:
				msgs[i].Content = clipOlderResult(msgs[i].Content, toolMax, artifacts[msgs[i].ToolCallID])
			case model.RoleAssistant:
				msgs[i].Content = clipMiddle(msgs[i].Content, textMax)
				msgs[i].ToolCalls = clipCallArgs(msgs[i].ToolCalls, textMax, fx.planCall)
			}
		}
	}
	clipNewestCalls := func(n int) {
		if last := lastAssistant(req.Messages); last < len(req.Messages) {
			req.Messages[last].ToolCalls = clipCallArgs(req.Messages[last].ToolCalls, n, fx.planCall)
		}
	}
	var cut []string
	fits := func() bool {
		cut = fitNewest(req, f, budget, newest)
		return EstimateRequest(req, f) <= budget
	}
	clipOlder(1000, 500)
	if EstimateRequest(req, f) <= budget {
		return nil
	}
	// The newest calls' long arguments (the model wrote them) give way
	// before their results (which it has not seen).
	clipNewestCalls(2000)
	if EstimateRequest(req, f) <= budget || fits() {
		return cut
	}
	clipOlder(300, 300)
	if fits() {
		return cut
	}
	// Leave out the oldest turns (an assistant message with its results,
	// or a user message) after the task, the person's messages before
	// the view and the summary, keeping the newest and every person's
	// message.
	keepFrom := 1
	for keepFrom < len(pins) && pins[keepFrom] {
		keepFrom++
	}
	if len(req.Messages) > keepFrom && req.Messages[keepFrom].Role == model.RoleUser {
		keepFrom++
	}
	note := model.Message{Role: model.RoleUser, Content: "[Keel: older turns were left out of this request to fit the context window.]"}
	noted := false
	for {
		msgs := req.Messages
		start := keepFrom
		if noted {
			start++
		}
		for start < len(msgs) && pins[start] {
			start++
		}
		if start >= lastAssistant(msgs) {
			break
		}
		end := start + 1
		if msgs[start].Role == model.RoleAssistant {
			req.PriorTurns++
			for end < len(msgs) && msgs[end].Role == model.RoleTool {
				end++
			}
			if fx.plan != "" && slices.ContainsFunc(msgs[start].ToolCalls, func(c model.ToolCall) bool { return c.ID == fx.planCall }) {
				note.Content += "\n\nYour plan (todo) as it stands:\n" + fx.plan
				if noted {
					msgs[keepFrom].Content = note.Content
				}
			}
		}
		out := make([]model.Message, 0, len(msgs)-(end-start)+1)
		kept := make([]bool, 0, cap(out))
		if !noted {
			out = append(append(append(out, msgs[:keepFrom]...), note), msgs[keepFrom:start]...)
			kept = append(append(append(kept, pins[:keepFrom]...), false), pins[keepFrom:start]...)
			noted = true
		} else {
			out, kept = append(out, msgs[:start]...), append(kept, pins[:start]...)
		}
		req.Messages, pins = append(out, msgs[end:]...), append(kept, pins[end:]...)
		if EstimateRequest(req, f) <= budget {
			// Share the room this freed among the newest results.
			fits()
			return cut
		}
	}
	// Last: everything after the task but the newest results.
	for i := 1; i < len(req.Messages); i++ {
		if pins[i] {
			continue
		}
		switch m := &req.Messages[i]; m.Role {
		case model.RoleUser:
			m.Content = clipMiddle(m.Content, 2000)
		case model.RoleAssistant:
			m.Content = clipMiddle(m.Content, 300)
		}
	}
	clipNewestCalls(300)
	fits()
	return cut
}

// clipCallArgs returns calls with every string in their JSON arguments
// longer than n characters clipped to n (head and tail, with a marker),
// so that the arguments stay valid JSON. Arguments that are not a JSON
// object are left as they are, and so are those of the call keep (the
// plan's) up to maxPlanArgs characters. calls itself is not modified.
func clipCallArgs(calls []model.ToolCall, n int, keep string) []model.ToolCall {
	var out []model.ToolCall
	for i, c := range calls {
		size := utf8.RuneCountInString(c.Arguments)
		if size <= n || keep != "" && c.ID == keep && size <= maxPlanArgs {
			continue
		}
		var v map[string]any
		if json.Unmarshal([]byte(c.Arguments), &v) != nil || v == nil {
			continue
		}
		b, err := json.Marshal(clipStrings(v, n))
		if err != nil {
			continue
		}
		if out == nil {
			out = append([]model.ToolCall(nil), calls...)
		}
		out[i].Arguments = string(b)
	}
	if out == nil {
		return calls
	}
	return out
}

// clipStrings clips every string in the decoded JSON value v to n
// characters (clipMiddle).
func clipStrings(v any, n int) any {
	switch x := v.(type) {
	case string:
		return clipMiddle(x, n)
	case map[string]any:
		for k, e := range x {
			x[k] = clipStrings(e, n)
		}
	case []any:
		for i, e := range x {
			x[i] = clipStrings(e, n)
		}
	}
	return v
}

// newestResult is a result of the newest turn as the view holds it.
type newestResult struct {
	id, content string
	// artifact is the workspace file holding the whole result, or "".
	artifact string
}

// minResultShare is the least a result of the newest turn is given when
// the request is fitted, in tokens: the note naming its file and a few
// lines.
const minResultShare = 120

// fitNewest bounds the newest turn's results in req so that the request
// fits in budget tokens: the room left by every other message is shared
// among them, the smaller results first, each kept whole when it fits
// in its share (what it leaves over goes to the others), the others cut
// to their share, head and tail, with a note naming the file that holds
// the whole result. It starts from the whole results each time, and
// returns the ids of those it cut.
func fitNewest(req *model.Request, f Family, budget int, newest []newestResult) []string {
	if len(newest) == 0 {
		return nil
	}
	at := map[string]int{}
	for i := lastAssistant(req.Messages) + 1; i < len(req.Messages); i++ {
		if req.Messages[i].Role == model.RoleTool {
			at[req.Messages[i].ToolCallID] = i
			req.Messages[i].Content = ""
		}
	}
	room := budget - EstimateRequest(req, f)
	order := make([]int, len(newest))
	cost := make([]int, len(newest))
	for i := range newest {
		order[i] = i
		cost[i] = f.scale(EstimateText(newest[i].content))
	}
	slices.SortStableFunc(order, func(a, b int) int { return cost[a] - cost[b] })
	var cut []string
	for k, i := range order {
		r := newest[i]
		share := room / (len(order) - k)
		content := r.content
		if cost[i] > share {
			content = clipResult(r.content, max(share, minResultShare), r.artifact, f)
			cut = append(cut, r.id)
		}
		room -= f.scale(EstimateText(content))
		if j, ok := at[r.id]; ok {
			req.Messages[j].Content = content
		}
	}
	return cut
}

// clipResult keeps the head and tail of a result within about tokens
// estimated tokens of family f, with a note in the middle saying how
// much was left out and where the whole result is.
func clipResult(s string, tokens int, artifact string, f Family) string {
	n := utf8.RuneCountInString(s)
	where := "Repeat the call with a narrower range to see the rest."
	if artifact != "" {
		where = fmt.Sprintf("The whole result is in %s: read the rest from it in parts (read_file with offset and limit, grep, sed -n).", artifact)
	}
	note := func(left int) string {
		return fmt.Sprintf("\n[Keel: %d of this result's %d characters were left out of this request to fit the context window. %s]\n", left, n, where)
	}
	r := []rune(s)
	clip := func(chars int) string {
		head, tail := chars*2/3, chars/3
		return string(r[:head]) + note(n-head-tail) + string(r[n-tail:])
	}
	// The most characters whose clip fits: a binary search, as the
	// estimate grows with the characters kept.
	lo, hi := 0, n-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if f.scale(EstimateText(clip(mid))) <= tokens {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return clip(lo)
}

// clipOlderResult clips an older result as [clipMiddle] does; when the
// result has an artifact, the marker names it (a bounded output's own
// marker, which names it, is in the middle that is clipped).
func clipOlderResult(s string, max int, artifact string) string {
	if artifact == "" {
		return clipMiddle(s, max)
	}
	n := utf8.RuneCountInString(s)
	if n <= max {
		return s
	}
	r := []rune(s)
	head, tail := max*2/3, max/3
	return fmt.Sprintf("%s\n[… %d characters trimmed; the whole output is in %s …]\n%s", string(r[:head]), n-head-tail, artifact, string(r[n-tail:]))
}

// lastAssistant returns the index of the newest assistant message in
// msgs, or len(msgs).
func lastAssistant(msgs []model.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == model.RoleAssistant {
			return i
		}
	}
	return len(msgs)
}

// clipMiddle keeps at most max characters of s, head and tail, with a
// marker saying how much was trimmed.
func clipMiddle(s string, max int) string {
	n := utf8.RuneCountInString(s)
	if n <= max {
		return s
	}
	r := []rune(s)
	head, tail := max*2/3, max/3
	return fmt.Sprintf("%s\n[… %d characters trimmed …]\n%s", string(r[:head]), n-head-tail, string(r[n-tail:]))
}
