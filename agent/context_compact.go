package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
)

// maxSummaryAttempts bounds the summary requests of one compaction; after
// them Keel writes a mechanical summary, so compaction always ends.
const maxSummaryAttempts = 2

// minSummaryBudget is the smallest input budget (tokens) worth a summary
// request; below it the summary is mechanical at once.
const minSummaryBudget = 256

// summaryInstructions is the system prompt of a summary request.
const summaryInstructions = `You write the working memory of a software agent. The agent's earlier turns are about to leave its context window; your summary replaces them, so it must let the agent continue the task without them. Write plain text, no preamble.`

// summaryAsk ends the summary request.
const summaryAsk = `Write the summary now, in at most %d words, with these parts:
1. Goal: the task in one or two sentences, with any requirement learned since.
2. Done: what was changed (files, functions) and what was verified (commands run and their outcome).
3. Facts: findings the agent still needs (paths, names, error messages, values), exactly.
4. Open: what remains and the very next step.
Keep the agent's own words for decisions; do not invent results.`

// handoffNow performs a requested handoff at once when the run is at a
// turn boundary, so that it happens before a resume's message is added.
func (x *executor) handoffNow(ctx context.Context) error {
	if !x.st.ctx.handoffRequested {
		return nil
	}
	if t := x.st.LastTurn(); t != nil && !allDone(t) {
		return nil // after the interrupted calls are repaired, Step asks for it
	}
	a, ok := contextAction(x.st)
	if !ok || a.Compact == nil || !a.Compact.Handoff {
		return nil
	}
	return x.compact(ctx, a.Compact)
}

// compact performs a compaction: it asks the model for a summary of the
// turns leaving the view (at most maxSummaryAttempts requests, each built
// to fit the window however full the view is) and falls back to a
// mechanical summary, then journals context.compacted. A stop (ctx)
// during the summary call journals nothing; the step asks again.
func (x *executor) compact(ctx context.Context, c *Compaction) error {
	st := x.st
	cfg := st.contextConfig()
	fam := st.Family()
	window := cfg.Window
	if window <= 0 {
		window = fam.Window
	}
	// The estimates are of the requests sent (fitted to the window for
	// this executor's output limit), before and after; the view's
	// (unfitted) estimates are kept beside them.
	maxOut := x.p.MaxOutputTokens
	before := sentTokens(st, maxOut)
	ev := &ContextCompacted{From: c.From, To: c.To, Handoff: c.Handoff, Reason: c.Reason, TokensBefore: before, ViewTokensBefore: estimateView(st), Window: cfg.Window, Plan: st.Plan()}
	ev.FirstStep, ev.LastStep = stepRange(st, c.From, c.To)
	if c.Handoff {
		ev.NotesFile = cfg.NotesFile
		ev.Notes = x.readNotes(cfg.NotesFile)
	}
	prev := ""
	if n := len(st.ctx.compactions); n > 0 {
		prev = previousSummary(st.ctx.compactions[n-1])
	}
	// A summary is worth asking for only if it can be much smaller than
	// what it replaces: the model may write up to sumTokens, at most half
	// of that. Below minSummaryTokens the call could not help, and is
	// not made.
	replaced := fam.scale(replacedPieces(st, c.From, c.To))
	sumTokens := summaryTokens(st, c.From, c.To)
	why := ""
	if sumTokens < minSummaryTokens {
		why = fmt.Sprintf("the compacted messages are only about %d tokens, too few for a model summary to save anything", replaced)
	}
	budget := window - sumTokens - fam.scale(EstimateText(summaryInstructions)+EstimateText(summaryAsk)+64)
	start := x.now()
	for attempt := 0; why == "" && attempt < maxSummaryAttempts && budget >= minSummaryBudget; attempt++ {
		req := summaryRequest(st, c, prev, ev.Notes, budget, sumTokens, fam)
		resp, err := x.p.Model.Generate(ctx, req)
		if ctx.Err() != nil {
			return nil // the loop records the stop
		}
		// Every call that reports usage is paid, whether or not its
		// summary is used: its usage and cost join the event's (and so
		// the run's totals and limits) and the failed attempt's.
		var usage *model.Usage
		var cost float64
		if resp != nil {
			u := clampUsage(resp.Usage)
			usage = &u
			if x.p.Price != nil {
				cost = max(0, x.p.Price(u))
			}
			ev.Usage, ev.Cost = ev.Usage.Add(u), ev.Cost+cost
			if resp.Model != "" {
				ev.Model = resp.Model
			}
		}
		failed := func(kind, msg string) {
			a := SummaryAttempt{Kind: kind, Message: msg, BudgetTokens: budget, Cost: cost}
			if usage != nil && usage.Total() > 0 {
				a.Usage = usage
			}
			ev.Attempts = append(ev.Attempts, a)
		}
		if err != nil {
			kind := model.KindOf(err)
			failed(kind.String(), clipMiddle(err.Error(), 500))
			if kind == model.KindContextOverflow {
				budget /= 2
				continue
			}
			if kind.Retryable() {
				continue
			}
			break
		}
		text := strings.TrimSpace(resp.Message.Content)
		if text == "" {
			if len(resp.Message.ToolCalls) > 0 {
				failed("tool_call", fmt.Sprintf("the model answered with a call of %s instead of a summary", oneLineClip(resp.Message.ToolCalls[0].Name, 60)))
			} else {
				failed("empty", "the model returned no summary text")
			}
			continue
		}
		ev.Summary = clipTokens(text, sumTokens, fam)
		if after := sentTokensAfter(st, ev, maxOut); !c.Handoff && after >= before {
			failed("no_gain", fmt.Sprintf("the model's summary would leave the next request at %d tokens, not fewer than the %d before", after, before))
			ev.Summary = ""
		}
		break
	}
	ev.DurationMS = x.since(start)
	if ev.Summary == "" {
		if why == "" {
			why = "the context window is too small for a summary request"
		}
		if n := len(ev.Attempts); n > 0 {
			why = ev.Attempts[n-1].Message
		}
		ev.Mechanical = true
		// The mechanical summary, shorter and shorter until the request
		// sent shrinks by what the step function counted on; last, the
		// minimal one, with which the step function measured that gain.
		least := minCompactionGain(st.ContextWindow())
		for limit := cfg.SummaryTokens * 4; ; limit /= 2 {
			ev.Summary = mechanicalSummary(st, c.From, c.To, prev, why, limit)
			if c.Handoff || before-sentTokensAfter(st, ev, maxOut) >= least {
				break
			}
			if limit < 2*minMechanicalChars {
				ev.Summary = minimalSummary(ev.FirstStep, ev.LastStep)
				break
			}
		}
	}
	ev.TokensAfter = sentTokensAfter(st, ev, maxOut)
	if c.Handoff && ev.TokensAfter >= before {
		// Turns shorter than any summary: the handoff carries them as
		// they were (as text, clipped like a summary request's
		// transcript) when that is smaller. What can still grow the
		// request is the handoff's header, notes and plan.
		carried := *ev
		carried.Summary, carried.Carried, carried.Mechanical = carriedSummary(st, c.From, c.To, prev), true, true
		if n := sentTokensAfter(st, &carried, maxOut); n < ev.TokensAfter {
			*ev = carried
			ev.TokensAfter = n
		}
	}
	ev.ViewTokensAfter = estimateAfter(st, ev)
	return x.append(ctx, journal.ContextCompacted, ev)
}

// previousSummary is what a compaction's summary must cover of the
// compaction before it: its summary and, after a handoff, the notes it
// carried (the view shows them with that summary only; the plan is
// shown anew with each summary).
func previousSummary(c *ContextCompacted) string {
	if c.Notes == "" {
		return c.Summary
	}
	return fmt.Sprintf("%s\n\nThe agent's notes (%s) at the handoff:\n%s", strings.TrimSpace(c.Summary), c.NotesFile, strings.TrimSpace(c.Notes))
}

// carriedSummary is the summary of a handoff whose turns are shorter
// than any summary of them: the previous summary, then the turns
// [from, to) themselves, as a summary request's transcript renders them.
func carriedSummary(s *State, from, to int, prev string) string {
	var b strings.Builder
	if prev != "" {
		fmt.Fprintf(&b, "[summary of the turns before]\n%s\n\n", strings.TrimSpace(prev))
	}
	b.WriteString(strings.Join(transcript(s, from, to), ""))
	return strings.TrimSpace(b.String())
}

// clipTokens keeps the head and tail of s within about n estimated
// tokens of family f (clipMiddle by characters, shortened until the
// estimate fits: digits and symbols cost more tokens per character than
// words).
func clipTokens(s string, n int, f Family) string {
	chars := utf8.RuneCountInString(s)
	for range 8 {
		out := clipMiddle(s, chars)
		est := f.scale(EstimateText(out))
		if est <= n || chars <= 100 {
			return out
		}
		chars = max(100, chars*n/est-20)
	}
	return clipMiddle(s, chars)
}

// minSummaryTokens is the smallest summary worth a model call.
const minSummaryTokens = 64

// minMechanicalChars is the shortest mechanical summary Keel tries before
// the minimal one.
const minMechanicalChars = 300

// minimalSummary is Keel's shortest summary, for when neither the
// model's nor the mechanical one is smaller than what it replaces: it
// says which steps left the view and where they are kept.
func minimalSummary(first, last int) string {
	if first == 0 {
		return "Keel left earlier messages out of the view to fit the context window, without a summary (one would not have been shorter); the journal keeps them."
	}
	return fmt.Sprintf("Keel left steps %d–%d out of the view to fit the context window, without a summary (one would not have been shorter); the journal keeps them (keel runs show) and the workspace their changes.", first, last)
}

// readNotes returns the head of the workspace notes file, or "" when it
// does not exist or cannot be read. The content is journaled before use.
func (x *executor) readNotes(name string) string {
	if x.p.Env == nil || x.p.Env.Workspace == nil {
		return ""
	}
	rel, err := x.p.Env.Workspace.Resolve(name)
	if err != nil {
		return ""
	}
	// A regular file only, read without blocking: a FIFO or device in
	// its place must not hang or flood the handoff.
	b, err := tool.ReadRegular(x.p.Env.Workspace.FS(), rel, maxNotesBytes)
	if err != nil {
		return ""
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if len(b) > maxNotesBytes {
		s = s[:maxNotesBytes] + "\n[… notes cut at 8 KiB]"
	}
	return s
}

// stepRange returns the step numbers (1-based assistant turns) of the
// first and last assistant messages in s.Messages[from:to].
func stepRange(s *State, from, to int) (first, last int) {
	step := 0
	for i, m := range s.Messages[:to] {
		if m.Role != model.RoleAssistant {
			continue
		}
		step++
		if i >= from {
			if first == 0 {
				first = step
			}
			last = step
		}
	}
	return first, last
}

// stepsBefore counts the assistant messages before s.Messages[i].
func stepsBefore(s *State, i int) int {
	n := 0
	for _, m := range s.Messages[:i] {
		if m.Role == model.RoleAssistant {
			n++
		}
	}
	return n
}

// estimateAfter returns the estimated next request once ev is folded.
func estimateAfter(s *State, ev *ContextCompacted) int {
	msgs, pins := viewHead(s, ev.To, summaryMessage(ev))
	msgs, _ = appendConversation(msgs, pins, s, ev.To)
	return EstimateRequest(&model.Request{System: systemPrompt(s.Created), Tools: toolSpecs(s.Created), Messages: msgs}, s.Family())
}

// summaryRequest builds the request for a summary of messages
// [c.From, c.To) that fits in budget tokens however long they are: the
// task, the previous summary and each message are clipped, and when the
// transcript is still too long its middle is left out.
func summaryRequest(s *State, c *Compaction, prev, notes string, budget, summaryTokens int, f Family) *model.Request {
	chars := func(tokens int) int { return max(tokens*3, 200) }
	var b strings.Builder
	b.WriteString("Summarise the agent's work so far on the task below.\n\n<task>\n")
	b.WriteString(clipMiddle(s.Messages[0].Content, chars(budget/4)))
	b.WriteString("\n</task>\n\n")
	if prev != "" {
		b.WriteString("<summary_of_earlier_turns>\n")
		b.WriteString(clipMiddle(prev, chars(budget/4)))
		b.WriteString("\n</summary_of_earlier_turns>\n\n")
	}
	if notes != "" {
		b.WriteString("<agent_notes>\n")
		b.WriteString(clipMiddle(notes, chars(budget/8)))
		b.WriteString("\n</agent_notes>\n\n")
	}
	used := f.scale(EstimateText(b.String()))
	entries := transcript(s, c.From, c.To)
	b.WriteString("<transcript>\n")
	b.WriteString(fitEntries(entries, max(budget-used, 64), f))
	b.WriteString("</transcript>\n\n")
	fmt.Fprintf(&b, summaryAsk, max(summaryTokens*3/4, 50))
	return &model.Request{
		System:          summaryInstructions,
		Messages:        []model.Message{{Role: model.RoleUser, Content: b.String()}},
		MaxOutputTokens: summaryTokens,
		Purpose:         model.PurposeSummary,
	}
}

// transcript renders messages [from, to) as text entries, one per
// message, each clipped.
func transcript(s *State, from, to int) []string {
	steps := stepsBefore(s, from)
	var out []string
	ti := 0
	for i := from; i < to; i++ {
		m := s.Messages[i]
		var b strings.Builder
		if m.Role != model.RoleAssistant {
			fmt.Fprintf(&b, "[user]\n%s\n", clipMiddle(m.Content, 1500))
			out = append(out, b.String())
			continue
		}
		steps++
		fmt.Fprintf(&b, "[step %d: assistant]\n", steps)
		if t := strings.TrimSpace(m.Content); t != "" {
			b.WriteString(clipMiddle(t, 1500))
			b.WriteByte('\n')
		}
		var t *Turn
		for ti < len(s.Turns) && s.Turns[ti].Index <= i {
			if s.Turns[ti].Index == i {
				t = s.Turns[ti]
			}
			ti++
		}
		for k, tc := range m.ToolCalls {
			fmt.Fprintf(&b, "[call %s] %s\n", tc.Name, clipMiddle(tc.Arguments, 600))
			if t != nil && k < len(t.Calls) && t.Calls[k].Finished != nil {
				f := t.Calls[k].Finished
				tag := "result"
				if f.IsError {
					tag = "error"
				}
				fmt.Fprintf(&b, "[%s]\n%s\n", tag, clipOlderResult(f.Content, 1200, f.Artifact))
			}
		}
		out = append(out, b.String())
	}
	return out
}

// fitEntries joins entries within budget tokens: all of them if they
// fit, else the first third of the budget from the start and the rest
// from the end, with a line saying how many were left out.
func fitEntries(entries []string, budget int, f Family) string {
	cost := make([]int, len(entries))
	total := 0
	for i, e := range entries {
		cost[i] = f.scale(EstimateText(e))
		total += cost[i]
	}
	if total <= budget {
		return strings.Join(entries, "")
	}
	head, tail := 0, len(entries)
	used := 0
	for head < tail && used+cost[head] <= budget/3 {
		used += cost[head]
		head++
	}
	for tail > head && used+cost[tail-1] <= budget {
		used += cost[tail-1]
		tail--
	}
	var b strings.Builder
	for _, e := range entries[:head] {
		b.WriteString(e)
	}
	fmt.Fprintf(&b, "[… %d messages left out to fit the summary request …]\n", tail-head)
	if tail == len(entries) && head == tail {
		// Not even the newest entry fits: show its clipped end.
		b.WriteString(clipMiddle(entries[len(entries)-1], max(budget*3, 200)))
	}
	for _, e := range entries[tail:] {
		b.WriteString(e)
	}
	return b.String()
}

// mechanicalSummary is the summary Keel writes when the model cannot: the
// previous summary, then one line per step with its calls and outcomes,
// within limit characters (the middle steps left out when needed).
func mechanicalSummary(s *State, from, to int, prev, why string, limit int) string {
	var head strings.Builder
	first, last := stepRange(s, from, to)
	fmt.Fprintf(&head, "Mechanical summary, written by Keel because the model did not summarise (%s). ", clipMiddle(why, 200))
	if first > 0 {
		fmt.Fprintf(&head, "It lists the actions of steps %d–%d and their outcomes; read the workspace and the output files named in results for details.\n", first, last)
	} else {
		head.WriteString("The compacted messages held no model turns.\n")
	}
	if prev != "" {
		fmt.Fprintf(&head, "\nBefore that:\n%s\n", clipMiddle(prev, max(limit/3, 300)))
	}
	var lines []string
	n := stepsBefore(s, from)
	ti := 0
	for i := from; i < to; i++ {
		m := s.Messages[i]
		if m.Role != model.RoleAssistant {
			lines = append(lines, "- user: "+oneLineClip(m.Content, 200))
			continue
		}
		n++
		line := fmt.Sprintf("- step %d:", n)
		if t := oneLineClip(m.Content, 160); t != "" {
			line += " " + t
		}
		var t *Turn
		for ti < len(s.Turns) && s.Turns[ti].Index <= i {
			if s.Turns[ti].Index == i {
				t = s.Turns[ti]
			}
			ti++
		}
		for k, tc := range m.ToolCalls {
			line += "\n    " + callLine(tc)
			if t != nil && k < len(t.Calls) && t.Calls[k].Finished != nil {
				line += " → " + outcomeLine(t.Calls[k].Finished)
			}
		}
		lines = append(lines, line)
	}
	body := strings.Join(lines, "\n")
	if room := limit - head.Len(); len(body) > room && len(lines) > 2 {
		var keep []string
		size := 0
		h := 0
		for h < len(lines) && size+len(lines[h])+1 <= room/3 {
			size += len(lines[h]) + 1
			h++
		}
		t := len(lines)
		for t > h && size+len(lines[t-1])+1 <= room-80 {
			size += len(lines[t-1]) + 1
			t--
		}
		keep = append(keep, lines[:h]...)
		keep = append(keep, fmt.Sprintf("- … %d entries left out …", t-h))
		keep = append(keep, lines[t:]...)
		body = strings.Join(keep, "\n")
	}
	return head.String() + "\n" + body
}

// callLine renders a call on one line: the main argument of well-known
// tools, else the arguments.
func callLine(tc model.ToolCall) string {
	var m map[string]any
	if json.Unmarshal([]byte(tc.Arguments), &m) == nil {
		for _, k := range []string{"command", "code", "path", "pattern", "url"} {
			if v, ok := m[k].(string); ok {
				return tc.Name + ": " + oneLineClip(v, 160)
			}
		}
	}
	return tc.Name + " " + oneLineClip(tc.Arguments, 160)
}

// outcomeLine renders a result on one line.
func outcomeLine(f *ToolFinished) string {
	var parts []string
	if f.ExitCode != nil {
		parts = append(parts, fmt.Sprintf("exit %d", *f.ExitCode))
	} else if f.IsError {
		parts = append(parts, "error")
	} else {
		parts = append(parts, "ok")
	}
	if f.TimedOut {
		parts = append(parts, "timed out")
	}
	out := strings.TrimSpace(ResultOutput(&f.Result))
	switch {
	case out == "" || f.ExitCode != nil && f.OutputBytes == 0:
		parts = append(parts, "no output")
	default:
		parts = append(parts, fmt.Sprintf("%d lines", strings.Count(out, "\n")+1))
		// A failure's last line usually names the error; a success's
		// first line is the most telling.
		line := oneLineClip(out, 100)
		if f.IsError || f.ExitCode != nil && *f.ExitCode != 0 {
			line = lastLineClip(out, 100)
		}
		parts = append(parts, "“"+line+"”")
	}
	if f.Artifact != "" {
		parts = append(parts, "full output "+f.Artifact)
	}
	return strings.Join(parts, ", ")
}

// lastLineClip returns the last non-empty line of s, clipped to n runes.
func lastLineClip(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return oneLineClip(lines[len(lines)-1], n)
}

// oneLineClip returns the first non-empty line of s, clipped to n runes.
func oneLineClip(s string, n int) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			r := []rune(l)
			if len(r) > n {
				return string(r[:n]) + "…"
			}
			return l
		}
	}
	return ""
}
