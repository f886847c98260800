package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/internal/view"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/visible"
)

// item is one entry of a run's conversation in the web UI: a message, a
// tool call with its output, a checkpoint of the files, the end. ID is
// the element's id: a later event that changes an entry (a call's
// result, its approval) renders it again with the same id, and the page
// replaces it.
type item struct {
	ID   string
	HTML template.HTML
}

// Bounds of what the conversation shows of a call; the rest is in the
// raw events and the artifacts.
const (
	convTextChars   = 20000
	convOutputLines = 60
	convOutputChars = 16000
)

// convCall is what the conversation knows of one tool call.
type convCall struct {
	id, tool, args string
	step           int
	state          string // running, asked, denied, done, failed
	decision       string
	approval       string // who decided, and how
	result         *agent.ToolFinished
}

// convRenderer renders a run's events, in order, as conversation items,
// from their rows (package internal/view).
type convRenderer struct {
	runID string
	rows  view.Reader
	calls map[string]*convCall
	// said is the text of the model's newest message: the run's end
	// does not show it again as its output.
	said string
	// last is the id of the newest item shown; egress the newest network
	// note's detail, egressID its item and egressN how many identical
	// decisions in a row it stands for (a client's retries open a tunnel
	// each: they show as one note with a count).
	last, egress, egressID string
	egressN                int
	// rewind and fork say which forms a checkpoint offers: the viewer's
	// token may change runs, and (fork) the run is not a child agent's,
	// which is forked through its lead.
	rewind, fork bool
}

// newConvRenderer renders run runID's conversation, offering no form
// (see convFor).
func newConvRenderer(runID string) *convRenderer {
	return &convRenderer{runID: runID, calls: map[string]*convCall{}}
}

// convFor renders run's conversation for viewer who, with the forms at
// its checkpoints who may use (mayChange: who may change the run, as
// service.MayChange says; forking needs only the scope).
func convFor(run *api.Run, who *caller, mayChange bool) *convRenderer {
	r := newConvRenderer(run.ID)
	write := token.HasScope(&who.Token, api.ScopeRunsWrite)
	r.rewind = write && mayChange
	r.fork = write && run.Parent == ""
	return r
}

// render returns the items event e adds or changes.
func (r *convRenderer) render(e *journal.Event) []item {
	vr := r.rows.Read(e)
	if vr.Payload == nil {
		return nil
	}
	f := convRows[e.Type]
	if f == nil {
		return nil
	}
	var h html
	items := f(r, &h, vr)
	if items == nil && h.b.Len() > 0 {
		items = []item{{ID: fmt.Sprintf("i%d", e.Seq), HTML: template.HTML(h.b.String())}}
	}
	if n := len(items); n > 0 {
		r.last = items[n-1].ID
	}
	return items
}

// convRows renders each event type in the conversation, one entry per
// type (view.Check): it writes a new item to h, or returns the items it
// adds or changes (a call's), or neither; nil shows nothing of the type.
var convRows = map[journal.Type]func(r *convRenderer, h *html, vr *view.Row) []item{
	journal.RunCreated: func(_ *convRenderer, h *html, vr *view.Row) []item {
		h.raw(`<div class="msg user"><div class="who">task</div><div class="text md">`)
		h.raw(string(markdown(clip(vr.Payload.(*agent.RunCreated).Task, convTextChars))))
		h.raw(`</div></div>`)
		return nil
	},
	journal.RunResumed: func(_ *convRenderer, h *html, vr *view.Row) []item {
		// A plain resume (after a decision, the next turn) shows nothing:
		// the run simply goes on.
		x := vr.Payload.(*agent.RunResumed)
		w := x.Changes()
		if w == "" && x.By == "" {
			return nil
		}
		h.raw(`<div class="note"><span class="type">resumed</span> `)
		if x.By != "" {
			h.text("by " + x.By)
			if w != "" {
				h.text(": ")
			}
		}
		h.text(clip(w, 400))
		h.raw(`</div>`)
		return nil
	},
	journal.SetupFinished: noteItem,
	journal.ModelResponded: func(r *convRenderer, h *html, vr *view.Row) []item {
		x := vr.Payload.(*agent.ModelResponded)
		r.said = strings.TrimSpace(x.Message.Content)
		h.raw(`<div class="msg assistant"><div class="who">`)
		h.text(fmt.Sprintf("model · step %d · %s in / %s out · $%.5f · %s", vr.Step, groupDigits(x.Usage.InputTokens), groupDigits(x.Usage.OutputTokens), x.Cost, ms(x.DurationMS)))
		h.raw(`</div>`)
		if t := strings.TrimSpace(x.Message.Content); t != "" {
			h.raw(`<div class="text md">`)
			h.raw(string(markdown(clip(t, convTextChars))))
			h.raw(`</div>`)
		}
		h.raw(`</div>`)
		out := []item{{ID: fmt.Sprintf("i%d", vr.Event.Seq), HTML: template.HTML(h.b.String())}}
		for _, c := range x.Message.ToolCalls {
			cc := &convCall{id: c.ID, tool: c.Name, args: c.Arguments, step: vr.Step, state: "running"}
			r.calls[c.ID] = cc
			out = append(out, r.callItem(cc))
		}
		return out
	},
	journal.ModelFailed: noteItem,
	journal.GateDecided: func(r *convRenderer, _ *html, vr *view.Row) []item {
		x := vr.Payload.(*agent.GateDecided)
		return r.changeCall(x.CallID, func(c *convCall) {
			c.decision = string(x.Effect)
			if x.Effect == "deny" {
				c.state, c.approval = "denied", "denied by the policy: "+x.Reason
			}
		})
	},
	journal.ApprovalRequested: func(r *convRenderer, _ *html, vr *view.Row) []item {
		return r.changeCall(vr.CallID, func(c *convCall) { c.state = "asked" })
	},
	journal.ApprovalResolved: func(r *convRenderer, _ *html, vr *view.Row) []item {
		x := vr.Payload.(*agent.ApprovalResolved)
		return r.changeCall(x.CallID, func(c *convCall) {
			c.state = "running"
			by := x.By
			if by == "" {
				by = "a person"
			}
			c.approval = fmt.Sprintf("%s by %s", map[bool]string{true: "approved", false: "denied"}[x.Decision == "allow"], by)
			if x.Remember != "" {
				c.approval += " (always, for this " + x.Remember + ")"
			}
			if x.Reason != "" {
				c.approval += ": " + x.Reason
			}
			if x.Decision != "allow" {
				c.state = "denied"
			}
		})
	},
	journal.AuthRequired:   noteItem,
	journal.AuthResolved:   noteItem,
	journal.InputRequested: nil, // the approvals inbox asks it; the call shows running
	journal.InputAnswered:  nil,
	journal.ToolStarted:    nil, // the call shows from the model's response on
	journal.ToolFinished: func(r *convRenderer, _ *html, vr *view.Row) []item {
		x := vr.Payload.(*agent.ToolFinished)
		c := r.calls[x.CallID]
		if c == nil {
			c = &convCall{id: x.CallID, tool: x.Tool}
			r.calls[x.CallID] = c
		}
		c.result = x
		switch {
		case c.state == "denied" && x.Synthetic:
			// The denial's own result: the call never ran, and stays
			// labelled denied, not error, once the run goes on.
		case x.IsError:
			c.state = "failed"
		default:
			c.state = "done"
		}
		return []item{r.callItem(c)}
	},
	journal.RunCompleted:      endItem,
	journal.RunFailed:         endItem,
	journal.RunCanceled:       endItem,
	journal.RunPaused:         endItem,
	journal.UserMessage:       (*convRenderer).userMessage,
	journal.ContextCompacted:  noteItem,
	journal.SandboxEgress:     (*convRenderer).egressNote,
	journal.SandboxQuarantine: noteItem,
	journal.ChildSpawned:      noteItem,
	journal.ChildDelivered:    noteItem,
	// A rewind's intent; its workspace.restored (or the checkpoint that
	// says it did not finish) follows.
	journal.WorkspaceRestoring: noteItem,
	journal.WorkspaceCheckpoint: func(r *convRenderer, h *html, vr *view.Row) []item {
		x := vr.Payload.(*agent.WorkspaceCheckpoint)
		h.raw(`<div class="files-note checkpoint" data-seq="`)
		h.text(fmt.Sprint(vr.Event.Seq))
		h.raw(`"><span class="type">files</span> `)
		filesHTML(h, x.Files, x.MoreFiles, "checkpoint")
		r.checkpointActions(h, vr.Event.Seq)
		h.raw(`</div>`)
		return nil
	},
	journal.WorkspaceRestored: func(r *convRenderer, h *html, vr *view.Row) []item {
		x := vr.Payload.(*agent.WorkspaceRestored)
		h.raw(`<div class="files-note restored"><span class="type">rewound</span> `)
		h.text(fmt.Sprintf("files restored to event %d", x.To))
		if x.By != "" {
			h.text(" by " + x.By)
		}
		h.text(": ")
		filesHTML(h, x.Files, x.MoreFiles, "restore")
		r.checkpointActions(h, vr.Event.Seq)
		h.raw(`</div>`)
		return nil
	},
}

// changeCall applies change to the call id the conversation shows and
// returns its item again; a call it does not show changes nothing.
func (r *convRenderer) changeCall(id string, change func(*convCall)) []item {
	c := r.calls[id]
	if c == nil {
		return nil
	}
	change(c)
	return []item{r.callItem(c)}
}

func (r *convRenderer) userMessage(h *html, vr *view.Row) []item {
	x := vr.Payload.(*agent.UserMessage)
	who := "you"
	if x.By != "" {
		who = x.By
	}
	cls := "user"
	if x.Source != "" {
		who, cls = x.Source, "note"
	}
	fmt.Fprintf(&h.b, `<div class="msg %s"><div class="who">`, cls)
	h.text(who)
	h.raw(`</div><div class="text md">`)
	h.raw(string(markdown(clip(x.Content, convTextChars))))
	h.raw(`</div></div>`)
	return nil
}

// noteItem shows an event as a note: its type and one-line detail.
func noteItem(_ *convRenderer, h *html, vr *view.Row) []item {
	h.raw(`<div class="note"><span class="type">`)
	h.text(string(vr.Event.Type))
	h.raw(`</span> `)
	h.text(clip(vr.Payload.Detail(), 400))
	h.raw(`</div>`)
	return nil
}

// egressNote shows a decision of the sandbox's egress proxy as a note;
// one identical to the note shown just before replaces it, counted.
func (r *convRenderer) egressNote(h *html, vr *view.Row) []item {
	d := vr.Payload.Detail()
	if d == r.egress && r.last == r.egressID {
		r.egressN++
	} else {
		r.egress, r.egressID, r.egressN = d, fmt.Sprintf("i%d", vr.Event.Seq), 1
	}
	h.raw(`<div class="note"><span class="type">`)
	h.text(string(vr.Event.Type))
	h.raw(`</span> `)
	h.text(clip(d, 400))
	if r.egressN > 1 {
		h.text(fmt.Sprintf(" · %d times in a row", r.egressN))
	}
	h.raw(`</div>`)
	return []item{{ID: r.egressID, HTML: template.HTML(h.b.String())}}
}

// endItem shows how the run ended (or paused), with its output unless
// it is the model's last message, shown just above.
func endItem(r *convRenderer, h *html, vr *view.Row) []item {
	x := vr.Payload.(*agent.RunEnded)
	st := journal.StatusOf(vr.Event.Type)
	fmt.Fprintf(&h.b, `<div class="end %s"><span class="status %s">`, st, st)
	h.text(string(st))
	h.raw(`</span> `)
	h.text(x.Reason)
	if x.Message != "" {
		h.text(": " + clip(x.Message, 400))
	}
	if x.Output != "" && strings.TrimSpace(x.Output) != r.said {
		h.raw(`<pre>`)
		h.text(clip(x.Output, convTextChars))
		h.raw(`</pre>`)
	}
	h.raw(`</div>`)
	return nil
}

// checkpointActions adds the rewind and fork forms of a checkpoint that
// the viewer may use (r.rewind, r.fork); the page shows them only while
// nobody executes the run.
func (r *convRenderer) checkpointActions(h *html, seq int64) {
	if !r.rewind && !r.fork {
		return
	}
	run, s := url.PathEscape(r.runID), fmt.Sprint(seq)
	h.raw(`<span class="cp-actions when-stopped">`)
	if r.rewind {
		h.raw(`<form method="post" action="/ui/runs/` + run + `/rewind"><input type="hidden" name="to" value="` + s + `"><button class="rewind" data-to="` + s + `" title="put the workspace files back as they were here (the conversation stays)">Rewind files to here</button></form>`)
	}
	if r.fork {
		h.raw(`<form method="post" action="/ui/runs/` + run + `/fork"><input type="hidden" name="seq" value="` + s + `"><input type="hidden" name="start" value="1"><button class="fork-here" data-seq="` + s + `" title="a new run from this point, with these files">Fork from here</button></form>`)
	}
	h.raw(`</span>`)
}

func filesHTML(h *html, files []agent.FileChange, more int, what string) {
	if len(files) == 0 && more == 0 {
		if what == "checkpoint" {
			h.text("snapshot of the workspace")
		} else {
			h.text("no file changed")
		}
		return
	}
	for i, f := range files {
		if i > 0 {
			h.raw(", ")
		}
		h.raw(`<code class="fc ` + map[string]string{"A": "add", "M": "mod", "D": "del"}[f.Status] + `">`)
		h.text(f.Status + " " + f.Path)
		h.raw(`</code>`)
	}
	if more > 0 {
		h.text(fmt.Sprintf(" and %d more", more))
	}
}

// callItem renders a tool call: a collapsible block, open while it runs
// or waits, with its arguments and its output.
func (r *convRenderer) callItem(c *convCall) item {
	var h html
	open := ""
	if c.state == "running" || c.state == "asked" {
		open = " open"
	}
	fmt.Fprintf(&h.b, `<details class="call %s"%s><summary><span class="tool">`, c.state, open)
	h.text(c.tool)
	h.raw(`</span> <code class="args">`)
	// The tool's name is just before: the arguments only.
	h.text(clip(strings.TrimPrefix(agent.CallSummary(c.tool, c.args), c.tool+" "), 160))
	h.raw(`</code> <span class="state">`)
	switch {
	case c.state == "denied":
		h.text("denied")
	case c.result != nil && c.result.Result.ExitCode != nil:
		h.text(fmt.Sprintf("exit %d · %s", *c.result.Result.ExitCode, ms(c.result.DurationMS)))
	case c.result != nil && c.result.IsError:
		h.text("error · " + ms(c.result.DurationMS))
	case c.result != nil:
		h.text("ok · " + ms(c.result.DurationMS))
	case c.state == "asked":
		h.text("waiting for approval")
	default:
		h.text("running…")
	}
	h.raw(`</span></summary>`)
	if c.approval != "" {
		h.raw(`<p class="decided">`)
		h.text(c.approval)
		h.raw(`</p>`)
	}
	if c.state == "asked" {
		h.raw(`<p class="ask">This call waits for a person: see the approval above.</p>`)
	}
	if c.args != "" {
		var b bytes.Buffer
		if json.Indent(&b, []byte(c.args), "", "  ") != nil {
			b.Reset()
			b.WriteString(c.args)
		}
		h.raw(`<pre class="callargs">`)
		h.text(clip(b.String(), convTextChars))
		h.raw(`</pre>`)
	}
	if c.result != nil {
		out := c.result.Result.Content
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if len(lines) > convOutputLines {
			h.raw(`<p class="meta">`)
			h.text(fmt.Sprintf("last %d of %d lines", convOutputLines, len(lines)))
			h.raw(`</p>`)
			out = strings.Join(lines[len(lines)-convOutputLines:], "\n")
		}
		if len(out) > convOutputChars {
			out = out[len(out)-convOutputChars:]
		}
		h.raw(`<pre class="output">`)
		h.text(out)
		h.raw(`</pre>`)
		if a := c.result.Result.Artifact; a != "" {
			h.raw(`<p class="meta"><a href="/ui/runs/` + url.PathEscape(r.runID) + `/artifacts/` + escapePath(a) + `">whole output</a></p>`)
		}
	}
	h.raw(`</details>`)
	return item{ID: "call-" + c.id, HTML: template.HTML(h.b.String())}
}

// diffLine is one line of a unified diff, classed for styling.
type diffLine struct{ Class, Text string }

// fileDiff is one file's diff for the web UI.
type fileDiff struct {
	Path, Status   string
	Binary         bool
	Added, Removed int
	Lines          []diffLine
	// Problem says why a proposed edit would fail (as the tool would).
	Problem string
	// Hidden: git ignores the file only by rules written during the run.
	Hidden bool
	// Rewritten, Ignored, Files, Autorun: as checkpoint.Change's;
	// IgnoredWhere says why git does not show an ignored one.
	Rewritten, Ignored bool
	Files              int
	Autorun            string
	IgnoredWhere       string
	// Link, Note, NULs: as checkpoint.Change's.
	Link, Note string
	NULs       int
	// Later: the file changed again after the run (shown as the run
	// left it); Outside: it also changed while the run was paused or
	// waiting (its diff includes that).
	Later, Outside bool
}

func newFileDiff(c checkpoint.Change) fileDiff {
	d := fileDiff{Path: visible.String(c.Path), Status: string(c.Status), Binary: c.Binary, Added: c.Added, Removed: c.Removed, Hidden: c.Hidden,
		Rewritten: c.Rewritten, Ignored: c.Ignored, Files: c.Files, Autorun: visible.String(c.Autorun),
		Link: visible.String(c.Link), Note: visible.String(c.Note), NULs: c.NULs, Later: c.Later, Outside: c.Outside}
	if c.Ignored {
		d.IgnoredWhere = "ignored by git"
		if c.Path == ".git" || strings.HasPrefix(c.Path, ".git/") {
			d.IgnoredWhere = "in git's own directory"
		}
	}
	if c.Denied {
		d.Problem = "Content not shown: the run's policy denies this path."
		return d
	}
	for _, l := range strings.SplitAfter(c.Patch, "\n") {
		if l == "" {
			continue
		}
		cls := "ctx"
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
			cls = "hdr"
		case strings.HasPrefix(l, "@@"):
			cls = "hunk"
		case strings.HasPrefix(l, "+"):
			cls = "add"
		case strings.HasPrefix(l, "-"):
			cls = "del"
		}
		d.Lines = append(d.Lines, diffLine{cls, visible.String(strings.TrimSuffix(l, "\n"))})
	}
	return d
}

// proposedDiff is the diff an edit_file or write_file call waiting for
// approval would make (the service's EditOf: read from the run's
// workspace now as the run's file tools see it); nil for other tools.
func (h *Handler) proposedDiff(a api.Approval) *fileDiff {
	pe := h.svc.EditOf(context.Background(), a)
	switch {
	case pe.Problem != "":
		d := &fileDiff{Problem: pe.Problem}
		if pe.Diff != nil {
			d.Path = visible.String(pe.Diff.Path)
		}
		return d
	case pe.Diff == nil:
		return nil
	}
	f := pe.Diff
	d := newFileDiff(checkpoint.Change{Path: f.Path, Status: checkpoint.Status(f.Status), Binary: f.Binary, Patch: f.Patch, Added: f.Added, Removed: f.Removed,
		Denied: f.Denied, Hidden: f.Hidden, Rewritten: f.Rewritten, Ignored: f.Ignored, Files: f.Files, Autorun: f.Autorun, Link: f.Link, Note: f.Note, NULs: f.NULs, Later: f.Later})
	return &d
}
