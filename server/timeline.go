package server

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/view"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/visible"
)

// row is one event of a run's timeline, rendered for the web UI.
type row struct {
	Seq    int64
	Offset string
	Type   journal.Type
	// Class groups rows for styling: model, tool, gate, approval, end...
	Class string
	// Detail is HTML built by rowRenderer from escaped parts.
	Detail template.HTML
}

// Bounds of what one timeline row shows; the rest is one click away (the
// artifact link, or the raw event in the API).
const (
	rowTextChars   = 600
	rowOutputChars = 4000
)

// rowRenderer renders the events of one run in order, from their rows
// (package internal/view: the time since the run began, the step, each
// call's one-line summary).
type rowRenderer struct {
	runID string
	rows  *view.Reader
}

func newRowRenderer(runID string) *rowRenderer {
	return &rowRenderer{runID: runID, rows: view.NewReader(true)}
}

// html builds a row's detail from literal markup and escaped text.
type html struct{ b strings.Builder }

func (h *html) raw(s string)  { h.b.WriteString(s) }
func (h *html) text(s string) { h.b.WriteString(template.HTMLEscapeString(visible.String(s))) }
func (h *html) tag(tag, class, s string) {
	fmt.Fprintf(&h.b, `<%s class="%s">`, tag, class)
	h.text(s)
	fmt.Fprintf(&h.b, `</%s>`, tag)
}

// token shows the id of the API token a person acted with, if any.
func (h *html) token(id string) {
	if id == "" {
		return
	}
	h.raw(` <small class="token">`)
	h.text("(token " + id + ")")
	h.raw(`</small>`)
}

func (h *html) pre(s string, limit int) {
	if s == "" {
		return
	}
	if len(s) > limit {
		h.raw(`<details><summary>`)
		h.text(fmt.Sprintf("output (%d bytes; first %d shown)", len(s), limit))
		h.raw(`</summary><pre>`)
		h.text(headTail(s, limit))
		h.raw(`</pre></details>`)
		return
	}
	h.raw(`<pre>`)
	h.text(s)
	h.raw(`</pre>`)
}

func (r *rowRenderer) render(e *journal.Event) row {
	vr := r.rows.Read(e)
	out := row{Seq: e.Seq, Type: e.Type, Offset: vr.Offset.Round(time.Millisecond).String(), Class: strings.SplitN(string(e.Type), ".", 2)[0]}
	var h html
	switch f, known := timelineRows[e.Type]; {
	case vr.Err != nil:
		h.tag("span", "bad", vr.Err.Error())
	case known && vr.Payload != nil:
		f(r, &h, vr, &out)
	default:
		renderGeneric(&h, e)
	}
	out.Detail = template.HTML(h.b.String())
	return out
}

// timelineRows renders each event type as a row of the web UI's
// timeline, one entry per type (view.Check): it writes the detail to h
// and may change out's class.
var timelineRows = map[journal.Type]func(r *rowRenderer, h *html, vr *view.Row, out *row){
	journal.RunCreated: func(_ *rowRenderer, h *html, vr *view.Row, _ *row) {
		x := vr.Payload.(*agent.RunCreated)
		h.text(fmt.Sprintf("%d tools · model %s · sandbox %s", len(x.Tools), x.Model, x.Sandbox))
		if x.Principal != "" {
			h.text(" · agent " + x.Principal)
		}
		h.raw(`<div class="task">`)
		h.text(clip(x.Task, rowTextChars))
		h.raw(`</div>`)
	},
	journal.RunResumed: func(_ *rowRenderer, h *html, vr *view.Row, _ *row) {
		x := vr.Payload.(*agent.RunResumed)
		h.text("resumed")
		if x.By != "" {
			h.text(" by ")
			h.tag("strong", "by", x.By)
			h.token(x.Token)
		}
		if x.Model != "" {
			h.text(" with " + x.Model)
		}
		if len(x.Interrupted) > 0 {
			h.text(" · interrupted calls repaired: " + strings.Join(x.Interrupted, ", "))
		}
	},
	journal.SetupFinished: func(_ *rowRenderer, h *html, vr *view.Row, _ *row) {
		x := vr.Payload.(*agent.SetupFinished)
		h.text(fmt.Sprintf("setup script: exit %d · %s", x.ExitCode, ms(x.DurationMS)))
		h.pre(x.Output, rowOutputChars)
	},
	journal.ModelResponded: func(_ *rowRenderer, h *html, vr *view.Row, out *row) {
		x := vr.Payload.(*agent.ModelResponded)
		out.Class = "model"
		h.tag("strong", "", fmt.Sprintf("step %d", vr.Step))
		h.text(fmt.Sprintf(" · %s tokens in, %s out · $%.5f · %s", groupDigits(x.Usage.InputTokens), groupDigits(x.Usage.OutputTokens), x.Cost, ms(x.DurationMS)))
		if t := strings.TrimSpace(x.Message.Content); t != "" {
			h.raw(`<div class="say">`)
			h.text(clip(t, rowTextChars))
			h.raw(`</div>`)
		}
		for _, c := range x.Message.ToolCalls {
			h.raw(`<div class="call">→ `)
			h.tag("code", "", agent.CallSummary(c.Name, c.Arguments))
			h.raw(`</div>`)
		}
	},
	journal.ModelFailed: func(_ *rowRenderer, h *html, vr *view.Row, out *row) {
		x := vr.Payload.(*agent.ModelFailed)
		out.Class = "bad"
		h.text(x.Kind + ": " + clip(x.Message, rowTextChars))
	},
	journal.GateDecided: func(_ *rowRenderer, h *html, vr *view.Row, out *row) {
		x := vr.Payload.(*agent.GateDecided)
		out.Class = "gate"
		h.tag("span", "effect "+string(x.Effect), string(x.Effect))
		h.text(" " + callText(vr, x.Tool))
		if len(x.Policies) > 0 {
			h.text(" · " + strings.Join(x.Policies, ", "))
		}
		if x.Reason != "" {
			h.raw(`<div class="reason">`)
			h.text(clip(x.Reason, rowTextChars))
			h.raw(`</div>`)
		}
	},
	journal.ApprovalRequested: func(_ *rowRenderer, h *html, vr *view.Row, out *row) {
		out.Class = "approval"
		h.text("waiting for a person to approve ")
		h.tag("code", "", callText(vr, vr.Payload.(*agent.ApprovalRequested).Tool))
		h.raw(` · <a href="/ui/approvals">inbox</a>`)
	},
	journal.ApprovalResolved: func(_ *rowRenderer, h *html, vr *view.Row, out *row) {
		x := vr.Payload.(*agent.ApprovalResolved)
		out.Class = "approval"
		h.tag("span", "effect "+string(x.Decision), string(x.Decision))
		h.text(" " + callText(vr, "") + " by ")
		h.tag("strong", "by", orDash(x.By))
		h.token(x.Token)
		if x.Reason != "" {
			h.text(": " + x.Reason)
		}
		if x.Remember != "" {
			h.text(" (remembered for this " + x.Remember + ")")
		}
	},
	journal.AuthRequired:   detailRow,
	journal.AuthResolved:   detailRow,
	journal.InputRequested: detailRow,
	journal.InputAnswered:  detailRow,
	journal.ToolStarted: func(_ *rowRenderer, h *html, vr *view.Row, out *row) {
		x := vr.Payload.(*agent.ToolStarted)
		out.Class = "tool"
		h.tag("code", "", callText(vr, x.Tool))
		if x.Attempt > 1 {
			h.text(fmt.Sprintf(" (attempt %d)", x.Attempt))
		}
	},
	journal.ToolFinished: (*rowRenderer).toolFinished,
	journal.RunCompleted: runEndedRow,
	journal.RunFailed:    runEndedRow,
	journal.RunCanceled:  runEndedRow,
	journal.RunPaused:    runEndedRow,
	journal.UserMessage: func(_ *rowRenderer, h *html, vr *view.Row, _ *row) {
		x := vr.Payload.(*agent.UserMessage)
		if x.By != "" {
			h.tag("strong", "by", x.By)
			h.token(x.Token)
			h.text(": " + clip(x.Content, rowTextChars))
			return
		}
		h.text("user: " + clip(x.Content, rowTextChars))
	},
	journal.ContextCompacted:    detailRow,
	journal.SandboxEgress:       detailRow,
	journal.SandboxQuarantine:   detailRow,
	journal.WorkspaceCheckpoint: detailRow,
	journal.WorkspaceRestored:   detailRow,
	journal.WorkspaceRestoring:  detailRow,
	journal.ChildSpawned:        detailRow,
	journal.ChildDelivered:      detailRow,
}

// detailRow renders an event with no layout of its own: its one-line
// detail.
func detailRow(_ *rowRenderer, h *html, vr *view.Row, _ *row) {
	h.text(clip(vr.Payload.Detail(), rowTextChars))
}

func runEndedRow(_ *rowRenderer, h *html, vr *view.Row, out *row) {
	x := vr.Payload.(*agent.RunEnded)
	out.Class = "end " + string(journal.StatusOf(vr.Event.Type))
	h.tag("strong", "", x.Reason)
	if x.Message != "" {
		h.text(": " + clip(x.Message, rowTextChars))
	}
	h.token(x.Token)
	h.pre(x.Output, rowOutputChars)
}

func (r *rowRenderer) toolFinished(h *html, vr *view.Row, out *row) {
	x := vr.Payload.(*agent.ToolFinished)
	out.Class = "tool"
	switch {
	case x.Synthetic:
		out.Class = "bad"
		h.text("no run: ")
	case x.ExitCode != nil:
		h.text(fmt.Sprintf("exit %d", *x.ExitCode))
	case x.IsError:
		out.Class = "bad"
		h.text("error")
	default:
		h.text("ok")
	}
	if x.TimedOut {
		h.text(" · timed out")
	}
	h.text(" · " + ms(x.DurationMS) + " · " + callText(vr, x.Tool))
	if x.Artifact != "" {
		h.raw(fmt.Sprintf(` · <a href="/ui/runs/%s/artifacts/%s">full output`, url.PathEscape(r.runID), escapePath(x.Artifact)))
		if x.OutputBytes > 0 {
			h.text(fmt.Sprintf(" (%s bytes)", groupDigits(x.OutputBytes)))
		}
		h.raw(`</a>`)
	}
	h.pre(x.Content, rowOutputChars)
}

// renderGeneric shows an event of a type this version does not know (a
// newer journal) as its top-level fields, each value clipped.
func renderGeneric(h *html, e *journal.Event) {
	var m map[string]json.RawMessage
	if json.Unmarshal(e.Payload, &m) != nil {
		h.text(clip(string(e.Payload), rowTextChars))
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 {
			h.text(" · ")
		}
		var s string
		if json.Unmarshal(m[k], &s) != nil {
			s = string(m[k])
		}
		h.tag("span", "k", k)
		h.text(" " + clip(s, 300))
	}
}

// callText names the call a row is about: its summary, else its tool
// and id, else its id.
func callText(vr *view.Row, tool string) string {
	if vr.Call != "" {
		return vr.Call
	}
	if tool != "" {
		return tool + " " + vr.CallID
	}
	return vr.CallID
}

func headTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n/2]) + "\n[…]\n" + string(r[len(r)-n/2:])
}

func ms(d int64) string { return (time.Duration(d) * time.Millisecond).String() }

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}
