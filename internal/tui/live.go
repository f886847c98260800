package tui

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/visible"
)

// What keel run shows while nothing is journaled yet: the model's text as
// it streams, retries of the model request, and, on a terminal, a status
// block redrawn in place under the permanent lines: a spinner with the
// time the model has taken, or each running command with its elapsed
// time and the last lines it printed (the tool's output stream,
// tool.WithLive). The status block is Keel's own drawing; everything in
// it that came from a model or a tool is escaped (visible.String).

// liveTailLines is how many of a running command's last lines the status
// block shows.
const liveTailLines = 5

// liveRefresh is how often the status block is redrawn.
const liveRefresh = 150 * time.Millisecond

// spinner frames of the status block.
var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// liveView is the status block of a terminal. Its methods are called with
// the printer's lock held.
type liveView struct {
	w     io.Writer // the terminal, raw
	fd    int
	drawn int // lines of the block on screen (the cursor ends its last)
	frame int
	// model is set while a model call runs; since is when it started.
	model bool
	since time.Time
	note  string // the newest retry or tool call being written
	calls []*liveCall
	now   func() time.Time
}

// liveCall is a running tool call and the tail of its output, which the
// tool's goroutines write (own lock) while the printer draws it.
type liveCall struct {
	id, summary string
	start       time.Time

	mu      sync.Mutex
	lines   []string // the last complete lines, at most liveTailLines
	partial []byte   // the line being written
	bytes   int64
	nl      int64
}

// maxPartial bounds the unfinished line a call's tail keeps.
const maxPartial = 4096

// Write keeps the tail of what the call printed (tool.Output.Tee). Only
// the last lines of a chunk are looked at, so a flood of output costs a
// count of its newlines.
func (c *liveCall) Write(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bytes += int64(len(p))
	end := bytes.LastIndexByte(p, '\n')
	if end < 0 {
		c.partial = appendBounded(c.partial, p)
		return
	}
	c.nl += int64(bytes.Count(p, []byte{'\n'}))
	body, rest := p[:end], p[end+1:]
	var tail []string // newest first
	for len(tail) < liveTailLines {
		i := bytes.LastIndexByte(body, '\n')
		if i < 0 {
			// The chunk's first line ends the line being written.
			tail = append(tail, lineText(appendBounded(c.partial, body)))
			break
		}
		tail = append(tail, lineText(body[i+1:min(len(body), i+1+maxPartial)]))
		body = body[:i]
	}
	slices.Reverse(tail)
	c.lines = append(c.lines, tail...)
	if len(c.lines) > liveTailLines {
		c.lines = slices.Clone(c.lines[len(c.lines)-liveTailLines:])
	}
	c.partial = appendBounded(c.partial[:0], rest)
}

// appendBounded appends p to line up to maxPartial bytes.
func appendBounded(line, p []byte) []byte {
	if room := maxPartial - len(line); room > 0 {
		return append(line, p[:min(room, len(p))]...)
	}
	return line
}

// lineText is a line without the carriage return before its newline.
func lineText(b []byte) string { return strings.TrimSuffix(string(b), "\r") }

// tail returns the last lines (the unfinished one last) and the counts.
func (c *liveCall) tail() (lines []string, nl, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lines = append(lines, c.lines...)
	if len(c.partial) > 0 {
		lines = append(lines, string(c.partial))
	}
	if len(lines) > liveTailLines {
		lines = lines[len(lines)-liveTailLines:]
	}
	return lines, c.nl, c.bytes
}

// newLiveView returns the status block for w, or nil when w is not a
// terminal.
func newLiveView(w io.Writer) *liveView {
	f, ok := w.(*os.File)
	if !ok || !IsTerminal(w) {
		return nil
	}
	return &liveView{w: w, fd: int(f.Fd()), now: time.Now}
}

// width is the terminal's width in columns (80 when unknown).
func (v *liveView) width() int {
	if ws, err := unix.IoctlGetWinsize(v.fd, unix.TIOCGWINSZ); err == nil && ws.Col > 10 {
		return int(ws.Col)
	}
	return 80
}

// clear erases the block, leaving the cursor at the start of its first
// line.
func (v *liveView) clear() {
	if v == nil || v.drawn == 0 {
		return
	}
	s := "\r"
	if v.drawn > 1 {
		s += fmt.Sprintf("\x1b[%dA", v.drawn-1)
	}
	io.WriteString(v.w, s+"\x1b[J")
	v.drawn = 0
}

// lines is the block's content now.
func (v *liveView) lines() []string {
	spin := spinner[v.frame%len(spinner)]
	now := v.now()
	var out []string
	if v.model {
		s := fmt.Sprintf("%s waiting for the model · %s", spin, elapsed(now.Sub(v.since)))
		if v.note != "" {
			s += " · " + v.note
		}
		out = append(out, s)
	}
	for i, c := range v.calls {
		if i == 2 {
			out = append(out, fmt.Sprintf("  … and %d more call(s) running", len(v.calls)-2))
			break
		}
		tail, nl, size := c.tail()
		s := fmt.Sprintf("%s %s · %s", spin, c.summary, elapsed(now.Sub(c.start)))
		if size > 0 {
			s += fmt.Sprintf(" · %s lines, %s", num(nl), sizeText(size))
		}
		out = append(out, s)
		for _, l := range tail {
			out = append(out, "    │ "+l)
		}
	}
	return out
}

// draw redraws the block.
func (v *liveView) draw() {
	if v == nil {
		return
	}
	v.clear()
	ls := v.lines()
	if len(ls) == 0 {
		return
	}
	v.frame++
	w := v.width() - 1
	for i, l := range ls {
		ls[i] = clipWidth(visible.String(l), w)
	}
	io.WriteString(v.w, strings.Join(ls, "\n"))
	v.drawn = len(ls)
}

// clipWidth cuts s to n runes, marking the cut.
func clipWidth(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:max(n-1, 0)]) + "…"
}

// elapsed is d rounded for a person: 0.4s, 12s, 3m05s.
func elapsed(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	default:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
}

// sizeText is n bytes for a person.
func sizeText(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}

// guarded is the writer of the printer's permanent lines: it erases the
// status block first and ends a streamed line that is still open.
type guarded struct{ p *Printer }

func (g guarded) Write(b []byte) (int, error) {
	g.p.live.clear()
	if g.p.textOpen {
		io.WriteString(g.p.raw, "\n")
		g.p.textOpen = false
	}
	return g.p.raw.Write(b)
}

// StartLive starts redrawing the status block until the returned
// function is called; it does nothing without a terminal.
func (p *Printer) StartLive() (stop func()) {
	if p.live == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(liveRefresh)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.mu.Lock()
				if !p.textOpen && !p.paused {
					p.live.draw()
				}
				p.mu.Unlock()
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		p.mu.Lock()
		p.live.clear()
		p.mu.Unlock()
	}
}

// Pause erases the status block and stops redrawing it until resume
// (a question to the person is on screen).
func (p *Printer) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
	p.live.clear()
	if p.textOpen {
		io.WriteString(p.raw, "\n")
		p.textOpen = false
	}
}

// Resume redraws the status block again after Pause.
func (p *Printer) Resume() {
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
}

// CallContext is the agent's per-operation hook (ExecParams.Trace): a
// model call gets an observer that streams its text to the Printer, a
// tool run a live output sink for the status block.
func (p *Printer) CallContext(ctx context.Context, op agent.Operation) context.Context {
	if p.quiet || p.json {
		return ctx
	}
	if op.CallID != "" {
		if p.live == nil {
			return ctx
		}
		c := &liveCall{id: op.CallID, start: time.Now()}
		p.mu.Lock()
		c.summary = p.rows.Call(op.CallID)
		p.live.calls = append(p.live.calls, c)
		p.mu.Unlock()
		return tool.WithLive(ctx, c.Write)
	}
	p.mu.Lock()
	if p.live != nil {
		p.live.model, p.live.since, p.live.note = true, time.Now(), ""
	}
	p.mu.Unlock()
	return model.WithObserver(ctx, &model.Observer{Text: p.text, Call: p.modelCall, Retry: p.retry})
}

// callDone takes a finished call out of the status block.
func (p *Printer) callDone(id string) {
	if p.live == nil {
		return
	}
	for i, c := range p.live.calls {
		if c.id == id {
			p.live.calls = append(p.live.calls[:i], p.live.calls[i+1:]...)
			return
		}
	}
}

// text prints a piece of the model's answer as it arrives, indented like
// the rest of the step.
func (p *Printer) text(delta string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.streamed {
		delta = strings.TrimLeft(delta, " \t\r\n")
		if delta == "" {
			return
		}
		p.streamed, p.lineStart = true, true
	}
	p.endEgress()
	p.live.clear()
	var b strings.Builder
	for _, r := range delta {
		if p.lineStart && r != '\n' {
			b.WriteString("    ")
			p.lineStart = false
		}
		b.WriteRune(r)
		if r == '\n' {
			p.lineStart = true
		}
	}
	io.WriteString(escWriter{p.raw}, b.String())
	p.textOpen = !p.lineStart
}

// modelCall notes in the status block that the model writes a tool call.
func (p *Printer) modelCall(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live != nil {
		p.live.note = "writing a " + name + " call"
	}
}

// retry says that the model request is sent again, and why.
func (p *Printer) retry(r model.Retry) { p.retryNote(r.String()) }

// retryNote says s, a retry of the model request (model.Retry.String).
func (p *Printer) retryNote(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.err, "  model %s\n", s)
	if p.live != nil {
		p.live.note = s
	}
}

// Note prints s, a notice to the person (it ends with a newline), as a
// permanent line: the status block is erased first.
func (p *Printer) Note(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endEgress()
	io.WriteString(p.err, s)
}
