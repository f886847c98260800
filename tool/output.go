package tool

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"sync"
	"unicode/utf8"
)

// ArtifactDir is the workspace-relative directory under which [Output]
// stores whole outputs when the workspace has no state directory (see
// [Workspace.SetState]); with one they go to its [StateArtifacts]
// directory. Either way there is one subdirectory per run. ArtifactDir
// lies inside the protected .keel directory, so file tools and the
// sandbox cannot change it.
const ArtifactDir = ".keel/artifacts"

// Output is an [io.Writer] that bounds what a model sees of a command's
// output while keeping the whole of it (docs/architecture.md, "Contract — tool
// results"). Memory stays bounded whatever is written: Output keeps a head
// buffer and a ring buffer for the tail, each of about four times the
// character bound, and streams the raw bytes to a workspace artifact
// (.keel/artifacts/RUN/CALL.out, created through the workspace's
// [os.Root]) once they outgrow the head buffer. After [Output.Close],
// [Output.View] is the model's view: sanitised as by [Sanitize], very long
// lines clipped with a marker, and, when the output does not fit, its
// first and last lines around a marker giving the elided size and the
// artifact path.
//
// Write and Close are safe for concurrent use. Write never fails while
// the Output is open (a failure to save the artifact is reported in the
// view instead), so a command's pipe is always drained.
type Output struct {
	ws            *Workspace
	runID, callID string
	maxChars      int
	headCap       int
	tailCap       int

	mu      sync.Mutex
	head    []byte
	ring    []byte
	rpos    int  // next write position in ring
	wrapped bool // ring has been filled at least once
	total   int64
	lines   int64 // newline bytes seen

	art    *os.File
	artBuf *bufio.Writer
	artRel string
	artErr error

	closed bool
	view   string
	// tee, if set, is given each chunk as it is written ([Output.Tee]).
	tee func([]byte)
}

// errNoWorkspace is reported in a view when there is nowhere to save the
// whole output.
var errNoWorkspace = errors.New("no workspace")

// errOutputClosed is returned by a Write after Close.
var errOutputClosed = errors.New("tool: write to closed output")

// minOutputChars is the smallest usable view bound: room for a marker and
// a little text.
const minOutputChars = 600

// NewOutput returns an Output whose view holds at most maxChars characters
// (runes); maxChars <= 0 means [DefaultMaxResultChars], and values below a
// few hundred are raised to leave room for the elision marker. ws is where
// the whole output is saved when it does not fit; runID and callID name
// the artifact (characters outside [A-Za-z0-9._-] become '_'). A nil ws
// keeps nothing and says so in the marker.
func NewOutput(ws *Workspace, runID, callID string, maxChars int) *Output {
	if maxChars <= 0 {
		maxChars = DefaultMaxResultChars
	}
	maxChars = max(maxChars, minOutputChars)
	capacity := max(4*maxChars, 4096)
	return &Output{ws: ws, runID: runID, callID: callID, maxChars: maxChars, headCap: capacity, tailCap: capacity}
}

// Tee has each chunk written from now on also given to fn, in order, as
// it arrives, before it is recorded: a person can watch a command while
// it runs ([WithLive]). fn must not keep p and must not block; it does not
// change what is recorded or what the model sees.
func (o *Output) Tee(fn func(p []byte)) {
	o.mu.Lock()
	o.tee = fn
	o.mu.Unlock()
}

// Write records p. It never returns an error before Close; after Close it
// returns an error and records nothing.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return 0, errOutputClosed
	}
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	if o.tee != nil {
		o.tee(p)
	}
	if o.art == nil && o.artErr == nil && o.total+int64(n) > int64(o.headCap) {
		o.openArtifact()
	}
	o.total += int64(n)
	o.lines += int64(bytes.Count(p, newline))
	if o.art != nil {
		if _, err := o.artBuf.Write(p); err != nil {
			o.failArtifact(err)
		}
	}
	if len(o.head) < o.headCap {
		if o.head == nil {
			o.head = make([]byte, 0, min(o.headCap, max(2*n, 1024)))
		}
		k := min(n, o.headCap-len(o.head))
		o.head = append(o.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 {
		o.ringWrite(p)
	}
	return n, nil
}

var newline = []byte{'\n'}

func (o *Output) ringWrite(p []byte) {
	if o.ring == nil {
		o.ring = make([]byte, o.tailCap)
	}
	if len(p) >= len(o.ring) {
		copy(o.ring, p[len(p)-len(o.ring):])
		o.rpos = 0
		o.wrapped = true
		return
	}
	k := copy(o.ring[o.rpos:], p)
	o.rpos += k
	if k < len(p) {
		o.rpos = copy(o.ring, p[k:])
		o.wrapped = true
	} else if o.rpos == len(o.ring) {
		o.rpos = 0
		o.wrapped = true
	}
}

// ringData returns the tail bytes in stream order.
func (o *Output) ringData() []byte {
	if !o.wrapped {
		return o.ring[:o.rpos]
	}
	out := make([]byte, 0, len(o.ring))
	out = append(out, o.ring[o.rpos:]...)
	return append(out, o.ring[:o.rpos]...)
}

// openArtifact creates the artifact file and writes the head to it. Only
// called while nothing has been dropped yet (everything is in head).
func (o *Output) openArtifact() {
	if o.ws == nil {
		o.artErr = errNoWorkspace
		return
	}
	f, rel, err := createArtifact(o.ws, o.runID, safeName(o.callID, "call")+".out")
	if err != nil {
		o.artErr = err
		return
	}
	o.art, o.artRel = f, rel
	o.artBuf = bufio.NewWriterSize(f, 64<<10)
	if _, err := o.artBuf.Write(o.head); err != nil {
		o.failArtifact(err)
	}
}

// createArtifact creates (or replaces) the artifact base of runID in ws
// and returns it open for writing with its workspace-relative path.
func createArtifact(ws *Workspace, runID, base string) (*os.File, string, error) {
	if ws.state != nil {
		// Outside the workspace: nothing in it can redirect the write.
		dir := path.Join(StateArtifacts, safeName(runID, "run"))
		if err := ws.state.MkdirAll(dir, 0o755); err != nil {
			return nil, "", err
		}
		rel := path.Join(dir, base)
		f, err := ws.state.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, "", err
		}
		return f, ws.stateDir + "/" + rel, nil
	}
	root := ws.FS()
	dir := path.Join(ArtifactDir, safeName(runID, "run"))
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	// Hold the directory, then check it is the real one: a link swapped
	// in by a command cannot send the output elsewhere in the workspace.
	d, err := root.OpenRoot(dir)
	if err != nil {
		return nil, "", err
	}
	defer d.Close()
	held, err1 := d.Stat(".")
	now, err2 := root.Lstat(dir)
	real, err3 := ws.Resolve(dir)
	if err1 != nil || err2 != nil || err3 != nil || real != dir || !os.SameFile(held, now) {
		return nil, "", errors.New("the artifact directory is not a plain directory")
	}
	rel := path.Join(dir, base)
	// O_EXCL never follows a link, so a link planted at rel cannot
	// redirect the write; a stale file from an earlier attempt of the
	// same call is replaced.
	f, err := d.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		if err = d.Remove(base); err == nil {
			f, err = d.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		}
	}
	if err != nil {
		return nil, "", err
	}
	return f, rel, nil
}

// WriteArtifact saves data whole as the artifact name (mapped by
// [SafeName]) of runID in ws, under [ArtifactDir], and returns its
// workspace-relative path. Tools use it for results that are not text
// (an image, a resource an MCP server returned).
func WriteArtifact(ws *Workspace, runID, name string, data []byte) (string, error) {
	if ws == nil {
		return "", errNoWorkspace
	}
	f, rel, err := createArtifact(ws, runID, safeName(name, "artifact"))
	if err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		removeArtifact(ws, rel)
		return "", err
	}
	if err := f.Close(); err != nil {
		removeArtifact(ws, rel)
		return "", err
	}
	return rel, nil
}

// failArtifact records err, closes and removes the incomplete artifact.
func (o *Output) failArtifact(err error) {
	o.artErr = err
	if o.art != nil {
		o.art.Close()
		removeArtifact(o.ws, o.artRel)
	}
	o.art, o.artBuf, o.artRel = nil, nil, ""
}

// SafeName maps s to a file name of [A-Za-z0-9._-] of at most 64 bytes
// (other bytes become '_'), as [Output] names artifacts; it returns def
// for an empty result or a dot name.
func SafeName(s, def string) string { return safeName(s, def) }

// safeName maps s to a file name of [A-Za-z0-9._-] of at most 64 bytes;
// it returns def for an empty result or a dot name.
func safeName(s, def string) string {
	b := make([]byte, 0, min(len(s), 64))
	for i := 0; i < len(s) && len(b) < 64; i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_':
			b = append(b, c)
		default:
			b = append(b, '_')
		}
	}
	if len(b) == 0 || string(b) == "." || string(b) == ".." {
		return def
	}
	return string(b)
}

// Close ends the output: it renders the view, saves the artifact when the
// view does not show everything, and releases the file. It is idempotent
// and always returns nil; problems saving the artifact appear in the view.
func (o *Output) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	l := o.layout()
	if !l.complete && o.art == nil && o.artErr == nil {
		o.openArtifact()
	}
	if o.art != nil {
		if err := o.artBuf.Flush(); err != nil {
			o.failArtifact(err)
		} else if err := o.art.Close(); err != nil {
			o.failArtifact(err)
		}
		o.art, o.artBuf = nil, nil
	}
	o.view = o.format(l)
	o.head, o.ring = nil, nil
	return nil
}

// View returns the bounded, sanitised view of the output. Before Close it
// is a preview whose marker does not name an artifact.
func (o *Output) View() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return o.view
	}
	return o.format(o.layout())
}

// Bytes returns the number of bytes written so far.
func (o *Output) Bytes() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.total
}

// Artifact returns the workspace-relative path of the saved whole output,
// or "" when the view shows everything or saving failed.
func (o *Output) Artifact() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		return ""
	}
	return o.artRel
}

// layout is the chosen view before the marker is written.
type layout struct {
	head, tail   []byte // rendered text; tail empty when the view is whole
	complete     bool   // the view shows the whole sanitised output
	elided       bool   // head and tail are separated by elided output
	elidedBytes  int64
	elidedLines  int64
	clipped      bool // some line was clipped
	escapes      int
	renderedRune int
}

// reserve returns the room kept for the elision marker (which names the
// artifact, with searchAdvice) and the binary note.
func (o *Output) reserve() int {
	return 230 + len(searchAdvice) + len(safeName(o.runID, "run")) + len(safeName(o.callID, "call"))
}

func (o *Output) maxLine() int { return max(80, min(2000, o.maxChars/5)) }

func (o *Output) layout() layout {
	var l layout
	ring := o.ring
	if o.ring != nil {
		ring = o.ringData()
	}
	maxLine := o.maxLine()
	if o.total == int64(len(o.head)+len(ring)) {
		src := o.head
		if len(ring) > 0 {
			src = append(append(make([]byte, 0, len(o.head)+len(ring)), o.head...), ring...)
		}
		all := renderSpan(src, 0, len(src), -1, maxLine)
		if all.runes <= o.maxChars-o.reserve()/2 {
			l.head, l.clipped, l.escapes, l.renderedRune = all.text, all.clipped, all.escapes, all.runes
			l.complete = !all.clipped
			return l
		}
		budget := o.maxChars - o.reserve()
		h := renderSpan(src, 0, len(src), budget/2, maxLine)
		t := renderTail(src, h.raw, budget-h.runes, maxLine)
		l.head, l.tail = h.text, t.text
		l.elided = true
		l.elidedBytes = int64(len(src) - h.raw - t.raw)
		l.elidedLines = o.lines - int64(h.nls+t.nls)
		l.clipped = h.clipped || t.clipped
		l.escapes, l.renderedRune = h.escapes+t.escapes, h.runes+t.runes
		return l
	}
	// Bytes were dropped between head and ring.
	head := trimPartialRune(o.head)
	tail := ring
	if i := bytes.IndexByte(tail, '\n'); i >= 0 && i+1 < len(tail) {
		tail = tail[i+1:]
	} else {
		for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
			tail = tail[1:]
		}
	}
	budget := o.maxChars - o.reserve()
	h := renderSpan(head, 0, len(head), budget/2, maxLine)
	t := renderTail(tail, 0, budget-h.runes, maxLine)
	l.head, l.tail = h.text, t.text
	l.elided = true
	l.elidedBytes = o.total - int64(h.raw+t.raw)
	l.elidedLines = max(0, o.lines-int64(h.nls+t.nls))
	l.clipped = h.clipped || t.clipped
	l.escapes, l.renderedRune = h.escapes+t.escapes, h.runes+t.runes
	return l
}

// trimPartialRune drops an incomplete UTF-8 sequence cut at the end of b.
func trimPartialRune(b []byte) []byte {
	for k := 1; k <= 3 && k <= len(b); k++ {
		if utf8.RuneStart(b[len(b)-k]) {
			if !utf8.FullRune(b[len(b)-k:]) {
				return b[:len(b)-k]
			}
			break
		}
	}
	return b
}

// rendered is a run of rendered lines and the raw bytes they cover.
type rendered struct {
	text    []byte
	raw     int // raw bytes consumed
	nls     int // newlines consumed
	runes   int
	escapes int
	clipped bool
}

// renderLineClipped renders one line (without '\n') and clips it to
// maxLine runes with a marker.
func renderLineClipped(dst, line []byte, maxLine int) ([]byte, lineStats, bool) {
	start := len(dst)
	dst, st := appendLine(dst, line, modeDisplay)
	if st.runes <= maxLine {
		return dst, st, false
	}
	cut := start
	for i := 0; i < maxLine; i++ {
		_, n := utf8.DecodeRune(dst[cut:])
		cut += n
	}
	more := st.runes - maxLine
	dst = append(dst[:cut], " [… "...)
	dst = append(dst, formatCount(int64(more))...)
	dst = append(dst, " more characters on this line]"...)
	st.runes = utf8.RuneCount(dst[start:])
	return dst, st, true
}

// renderSpan renders the lines of src[from:to] from the start until
// budget runes would be exceeded (budget < 0: no bound). The first line is
// always shown, clipped to the budget if needed.
func renderSpan(src []byte, from, to, budget, maxLine int) rendered {
	var r rendered
	pos := from
	for pos < to {
		end, next := to, to
		if i := bytes.IndexByte(src[pos:to], '\n'); i >= 0 {
			end, next = pos+i, pos+i+1
		}
		lim := maxLine
		if budget >= 0 && r.runes == 0 && budget < lim+40 {
			lim = max(budget-40, 1)
		}
		before := len(r.text)
		var st lineStats
		var clipped bool
		r.text, st, clipped = renderLineClipped(r.text, src[pos:end], lim)
		cost := st.runes
		if next > end {
			cost++
		}
		if budget >= 0 && r.runes > 0 && r.runes+cost > budget {
			r.text = r.text[:before]
			break
		}
		if next > end {
			r.text = append(r.text, '\n')
			r.nls++
		}
		r.runes += cost
		r.escapes += st.escapes
		r.clipped = r.clipped || clipped
		r.raw += next - pos
		pos = next
	}
	return r
}

// renderTail renders the last lines of src, not reaching before floor,
// until budget runes would be exceeded.
func renderTail(src []byte, floor, budget, maxLine int) rendered {
	var r rendered
	if budget <= 0 {
		return r
	}
	var parts [][]byte
	end := len(src)
	for end > floor {
		// The line is src[start:lineEnd]; its '\n' (if any) is at lineEnd.
		lineEnd := end
		if src[end-1] == '\n' {
			lineEnd = end - 1
		}
		start := floor
		if i := bytes.LastIndexByte(src[floor:lineEnd], '\n'); i >= 0 {
			start = floor + i + 1
		}
		lim := maxLine
		if len(parts) == 0 && budget < lim+40 {
			lim = max(budget-40, 1)
		}
		text, st, clipped := renderLineClipped(nil, src[start:lineEnd], lim)
		cost := st.runes
		if lineEnd < end {
			text = append(text, '\n')
			cost++
		}
		if len(parts) > 0 && r.runes+cost > budget {
			break
		}
		parts = append(parts, text)
		r.runes += cost
		r.escapes += st.escapes
		r.clipped = r.clipped || clipped
		r.raw += end - start
		if lineEnd < end {
			r.nls++
		}
		end = start
	}
	for i := len(parts) - 1; i >= 0; i-- {
		r.text = append(r.text, parts[i]...)
	}
	return r
}

// format writes the view for l, with markers naming the artifact.
func (o *Output) format(l layout) string {
	var b []byte
	if l.renderedRune > 0 && l.escapes*10 > l.renderedRune && l.escapes >= 8 {
		b = append(b, "[output looks binary: control bytes and invalid UTF-8 are shown escaped]\n"...)
	}
	b = append(b, l.head...)
	where := o.whereNote()
	if l.elided {
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		b = append(b, "[… "...)
		if l.elidedLines > 0 {
			b = append(b, formatCount(l.elidedLines)...)
			b = append(b, " lines, "...)
		}
		b = append(b, formatCount(l.elidedBytes)...)
		b = append(b, " bytes elided of "...)
		b = append(b, formatCount(o.total)...)
		b = append(b, " total; "...)
		b = append(b, where...)
		b = append(b, " …]\n"...)
		b = append(b, l.tail...)
	} else if l.clipped {
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		b = append(b, "[long lines clipped; "...)
		b = append(b, where...)
		b = append(b, "]\n"...)
	}
	return string(b)
}

// searchAdvice follows the name of the file with the whole output in a
// cut view: the tools' descriptions do not say it, so that every request
// does not carry it; the model reads it when it applies.
const searchAdvice = "; search it, do not re-run"

// whereNote says where the whole output is.
func (o *Output) whereNote() string {
	switch {
	case o.artRel != "":
		return "full output: " + o.artRel + searchAdvice
	case o.artErr != nil:
		return "the full output could not be saved: " + artifactErrText(o.artErr)
	case !o.closed:
		return "full output saved when the command ends"
	}
	return "full output not saved"
}

func artifactErrText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// formatCount formats n with thousands separators: 49990000 →
// "49,990,000".
func formatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := false
	if n < 0 {
		neg, s = true, s[1:]
	}
	var b []byte
	for i, c := range []byte(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, c)
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}

// String returns the view; it implements [fmt.Stringer].
func (o *Output) String() string { return o.View() }

var _ fmt.Stringer = (*Output)(nil)
