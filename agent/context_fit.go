package agent

import (
	"fmt"
	"unicode/utf8"

	"github.com/keel-run/keel/model"
)

// contextAction decides whether the run compacts before its next model
// call: when a handoff was requested, or when the estimate of the next
// request passes the threshold and there is something to compact. It
// never returns a compaction that does not move the view forward, so
// compaction cannot loop: each one consumes at least one message. Nor
// does it return one (other than a handoff) that cannot shrink the view:
// when even Keel's shortest summary (minimalSummary) would not be
// smaller than the messages and the summary it replaces, it compacts
// everything but the newest message instead, or, if that cannot shrink
// the view either, not at all (the request is then fitted).
func contextAction(s *State) (Action, bool) {
	cfg := s.contextConfig()
	from, n := s.ViewStart(), len(s.Messages)
	if s.ctx.handoffRequested && from < n {
		return Action{Kind: ActCompact, Compact: &Compaction{From: from, To: n, Handoff: true, Reason: "requested", Estimate: estimateView(s)}}, true
	}
	if cfg.Window <= 0 || from >= n {
		return Action{}, false
	}
	est := estimateView(s)
	if float64(est) <= cfg.Threshold*float64(cfg.Window) {
		return Action{}, false
	}
	c := &Compaction{From: from, Reason: "threshold", Estimate: est}
	if cfg.HandoffAfter > 0 && s.ctx.sinceHandoff >= cfg.HandoffAfter {
		c.To, c.Handoff, c.Reason = n, true, "handoff"
	} else {
		c.To = chooseBoundary(s, from, keepBudget(s, cfg))
	}
	if c.To <= from {
		return Action{}, false
	}
	if !c.Handoff && !canShrink(s, c.From, c.To) {
		if c.To >= n-1 || !canShrink(s, c.From, n-1) {
			return Action{}, false
		}
		c.To = n - 1
	}
	return Action{Kind: ActCompact, Compact: c}, true
}

// minGain is the least a compaction must save, in pieces, for its
// estimate in tokens to drop after the family's rounding.
const minGain = 8

// replacedPieces returns the pieces a compaction of messages [from, to)
// takes out of the view: those messages with their results, and the
// previous summary.
func replacedPieces(s *State, from, to int) int {
	n := 0
	for _, p := range s.ctx.pieces[from:min(to, len(s.ctx.pieces))] {
		n += p
	}
	if k := len(s.ctx.compactions); k > 0 {
		n += perMessagePieces + EstimateText(summaryMessage(s.ctx.compactions[k-1]))
	}
	return n
}

// canShrink reports whether compacting messages [from, to) can make the
// view smaller: whether Keel's shortest summary, with the plan, is
// smaller than what it would replace.
func canShrink(s *State, from, to int) bool {
	first, last := stepRange(s, from, to)
	least := perMessagePieces + EstimateText(summaryMessage(&ContextCompacted{Summary: minimalSummary(first, last), FirstStep: first, LastStep: last, Plan: s.Plan()}))
	return least+minGain <= replacedPieces(s, from, to)
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
	if k := len(s.ctx.compactions); k > 0 {
		n += perMessagePieces + EstimateText(summaryMessage(s.ctx.compactions[k-1]))
	}
	for _, p := range s.ctx.pieces[min(start, len(s.ctx.pieces)):] {
		n += p
	}
	return s.Family().scale(n)
}

// chooseBoundary returns the smallest message index to in (from, n] such
// that messages [to, n) with their results fit in keep tokens. When even
// the newest message does not fit, it keeps only that one (to = n-1) if
// that still compacts something, else compacts everything (to = n).
func chooseBoundary(s *State, from, keep int) int {
	n := len(s.Messages)
	f := s.Family()
	groups := s.ctx.pieces[from:]
	to := n
	tail := 0
	for i := n - 1; i > from; i-- {
		tail += f.scale(groups[i-from])
		if tail > keep {
			break
		}
		to = i
	}
	if to == n && n-1 > from {
		to = n - 1
	}
	return to
}

// fitRequest trims req's messages, in passes of increasing severity,
// until its estimate is at most budget tokens: older tool results, then
// older assistant texts, then the newest results, then everything to a
// few hundred characters, and last whole turns from the oldest (their
// count is added to PriorTurns). The task and the newest turn are kept
// as long as anything else can give way. It is deterministic.
func fitRequest(req *model.Request, f Family, budget int) {
	if EstimateRequest(req, f) <= budget {
		return
	}
	msgs := append([]model.Message(nil), req.Messages...)
	req.Messages = msgs
	last := lastAssistant(msgs)
	passes := []struct {
		role   model.Role
		before bool // only messages before the newest turn
		max    int
	}{
		{model.RoleTool, true, 1000},
		{model.RoleAssistant, true, 500},
		{model.RoleTool, false, 2000},
		{model.RoleTool, false, 300},
		{model.RoleAssistant, false, 300},
		{model.RoleUser, false, 2000},
	}
	for _, p := range passes {
		for i := 1; i < len(msgs); i++ {
			if msgs[i].Role != p.role || (p.before && i >= last) {
				continue
			}
			msgs[i].Content = clipMiddle(msgs[i].Content, p.max)
		}
		if EstimateRequest(req, f) <= budget {
			return
		}
	}
	// Drop the oldest turns (an assistant message with its results, or a
	// user message) after the task and the summary, keeping the newest.
	keepFrom := 1
	if len(msgs) > 1 && msgs[1].Role == model.RoleUser {
		keepFrom = 2
	}
	note := model.Message{Role: model.RoleUser, Content: "[Keel: older turns were left out of this request to fit the context window.]"}
	noted := false
	for EstimateRequest(req, f) > budget {
		msgs := req.Messages
		start := keepFrom
		if noted {
			start++
		}
		if start >= lastAssistant(msgs) {
			return
		}
		end := start + 1
		if msgs[start].Role == model.RoleAssistant {
			req.PriorTurns++
			for end < len(msgs) && msgs[end].Role == model.RoleTool {
				end++
			}
		}
		out := make([]model.Message, 0, len(msgs)-(end-start)+1)
		out = append(out, msgs[:start]...)
		if !noted {
			out = append(out, note)
			noted = true
		}
		req.Messages = append(out, msgs[end:]...)
	}
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
