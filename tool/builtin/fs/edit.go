package fs

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/tool"
)

//go:embed edit_file.md
var editDescription string

func editTool() *tool.Tool {
	return &tool.Tool{
		Name:        EditName,
		Description: strings.TrimSpace(editDescription),
		InputSchema: json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "path": {"type": "string", "minLength": 1},
    "old_string": {"type": "string"},
    "new_string": {"type": "string"},
    "replace_all": {"type": "boolean"}
  },
  "required": ["path", "old_string", "new_string"]
}`),
		Effect: tool.WorkspaceWrite,
		Scope:  pathScope(""),
		State:  fileState,
		Check:  editCheck,
	}
}

// editCheck is edit_file's [tool.Tool].Check: the error the edit would
// fail with on the file as it is now (no such file, old_string not
// found or not unique), "" when it would apply.
func editCheck(req *tool.Request) string {
	if req.Env == nil || req.Env.Workspace == nil {
		return ""
	}
	path, before, _, problem, ok := PreviewIn(req.Env.Workspace, EditName, req.Arguments)
	if !ok || problem == "" || len(before) >= maxPreview {
		return ""
	}
	return fmt.Sprintf("cannot edit %s: %s", tool.Escape(path), problem)
}

type editor struct{ opts Options }

type editInput struct {
	Path       string `json:"path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all"`
}

func (e *editor) handle(ctx context.Context, req *tool.Request) (*tool.Result, error) {
	ws, bad := workspace(req)
	if bad != nil {
		return bad, nil
	}
	var in editInput
	if err := json.Unmarshal(req.Arguments, &in); err != nil {
		return tool.Errorf("invalid arguments for edit_file: %v", err), nil
	}
	shown := tool.Escape(in.Path)
	rel, err := ws.ResolveWrite(in.Path)
	if err != nil {
		return tool.Errorf("cannot edit %s: %s", shown, describeErr(err)), nil
	}
	tgt, err := openTarget(ws, rel, false)
	if err != nil {
		msg := describeErr(err)
		if errors.Is(err, iofs.ErrNotExist) {
			msg += "; to create a file use write_file"
		}
		return tool.Errorf("cannot edit %s: %s", shown, msg), nil
	}
	defer tgt.dir.Close()
	f, fi, res := openRegular(tgt.dir, tgt.base, shown)
	if res != nil {
		if strings.Contains(res.Content, "no such file") {
			res.Content += "; to create a file use write_file"
		}
		return res, nil
	}
	if fi.Size() > e.opts.MaxEditBytes {
		f.Close()
		return tool.Errorf("cannot edit %s: it has %s bytes, more than edit_file's limit of %s; edit it with a script through bash", shown, commas(fi.Size()), commas(e.opts.MaxEditBytes)), nil
	}
	data, err := io.ReadAll(io.LimitReader(f, e.opts.MaxEditBytes+1))
	f.Close()
	if err != nil {
		return tool.Errorf("cannot read %s: %s", shown, describeErr(err)), nil
	}
	if res := binaryRefusal(shown, data[:min(len(data), sampleSize)], int64(len(data)), "edit_file"); res != nil {
		return res, nil
	}
	ed, failure := applyEdit(data, in.OldString, in.NewString, in.ReplaceAll)
	if failure != "" {
		return tool.Errorf("cannot edit %s: %s", shown, failure), nil
	}
	if err := writeAtomic(tgt.dir, tgt.base, ed.out, fi); err != nil {
		return tool.Errorf("cannot write %s: %s; the file was not changed", shown, describeErr(err)), nil
	}
	var b strings.Builder
	occ := "occurrence"
	if ed.count > 1 {
		occ = "occurrences"
	}
	fmt.Fprintf(&b, "edited %s: replaced %d %s (first at line %d)", shown, ed.count, occ, ed.firstLine)
	if ed.crlf {
		b.WriteString("; CRLF line endings kept")
	}
	if n := links(fi); n > 1 {
		fmt.Fprintf(&b, "; edited in place: the file has %d hard links, and every one sees the change", n)
	}
	b.WriteString(". The changed region now reads:\n")
	b.WriteString(ed.snippet)
	return tool.Text(b.String()), nil
}

// edit is the outcome of applyEdit.
type edit struct {
	out       []byte
	count     int
	firstLine int
	crlf      bool   // new text was written with CRLF endings
	snippet   string // numbered lines around the first change, after it
}

// applyEdit replaces oldS with newS in data. Matching is exact on the
// text with CRLF pairs read as LF (a leading byte-order mark aside), and
// positions are mapped back to the original bytes, so bytes outside the
// replaced regions never change: CRLF endings, tabs, the BOM and the
// end-of-file newline state are kept. Inside a region, a line of newS
// that is also a line of the region keeps that line's own ending, so a
// file with mixed endings keeps each kept line's; only new line breaks
// take a style, that of the lines the region touches (the majority of
// their endings, the file's majority on a tie or when the region is
// inside one line ending at the end of the file), see restyle. It
// returns a failure message for the model instead when there is nothing
// to do, no match, or several matches without all.
func applyEdit(data []byte, oldS, newS string, all bool) (*edit, string) {
	var prefix []byte
	body := data
	if bytes.HasPrefix(body, bom) {
		prefix, body = bom, body[len(bom):]
	}
	norm, crlfAt := normalizeCRLF(body)
	old := strings.ReplaceAll(oldS, "\r\n", "\n")
	repl := strings.ReplaceAll(newS, "\r\n", "\n")
	if strings.HasPrefix(old, string(bom)) {
		// The model copied the file's start, BOM included: the BOM is
		// the file's (kept above, or absent), never part of the text
		// replaced, so a BOM leading new_string too is the same one.
		old = strings.TrimPrefix(old, string(bom))
		repl = strings.TrimPrefix(repl, string(bom))
	} else if prefix != nil && strings.HasPrefix(repl, string(bom)) {
		// The file has its BOM already; a second one would be text.
		repl = strings.TrimPrefix(repl, string(bom))
	}
	switch {
	case old == "":
		return nil, "old_string is empty; to create a file or replace all of it, use write_file"
	case old == repl:
		return nil, "old_string and new_string are the same; there is nothing to change"
	}
	var starts []int // every match, overlapping ones included
	for i := 0; ; {
		j := strings.Index(norm[i:], old)
		if j < 0 {
			break
		}
		starts = append(starts, i+j)
		_, n := utf8.DecodeRuneInString(norm[i+j:])
		i += j + max(n, 1)
	}
	fileCRLF := len(crlfAt) > strings.Count(norm, "\n")-len(crlfAt)
	if len(starts) == 0 {
		return nil, notFound(norm, old, oldS, len(crlfAt) > 0)
	}
	lines := lineNumbers(norm, starts)
	if len(starts) > 1 && !all {
		return nil, fmt.Sprintf("%d matches at lines %s; add context or set replace_all (old_string must occur exactly once: include surrounding lines to pick one, or set replace_all to true to change every occurrence)", len(starts), joinInts(lines, 10))
	}
	orig := func(n int) int { return n + sort.SearchInts(crlfAt, n) }
	ed := &edit{firstLine: lines[0]}
	out := make([]byte, 0, len(data)+len(repl)*len(starts))
	out = append(out, prefix...)
	prev, next := 0, 0
	for _, s := range starts {
		if s < next {
			continue // overlaps the previous replacement
		}
		a, z := orig(s), orig(s+len(old))
		text := restyle(body[a:z], repl, regionCRLF(body, a, z, fileCRLF))
		ed.crlf = ed.crlf || strings.Contains(text, "\r\n")
		out = append(out, body[prev:a]...)
		out = append(out, text...)
		prev, next = z, s+len(old)
		ed.count++
	}
	out = append(out, body[prev:]...)
	ed.out = out
	ed.snippet = snippet(out[len(prefix):], ed.firstLine, strings.Count(repl, "\n"))
	return ed, ""
}

// regionCRLF decides the line-break style of new text replacing
// body[a:z]: CRLF when most lines the region touches end with CRLF (its
// own line breaks, and the end of the line it ends in), LF when most end
// with LF, and the file's majority (fileCRLF) on a tie or when none has
// an ending.
func regionCRLF(body []byte, a, z int, fileCRLF bool) bool {
	nl := bytes.Count(body[a:z], []byte("\n"))
	cr := bytes.Count(body[a:z], []byte("\r\n"))
	if z == a || body[z-1] != '\n' {
		if i := bytes.IndexByte(body[z:], '\n'); i >= 0 {
			nl++
			if z+i > 0 && body[z+i-1] == '\r' && z+i-1 >= a {
				cr++
			}
		}
	}
	if nl == 0 || cr*2 == nl {
		return fileCRLF
	}
	return cr*2 > nl
}

// maxAlign bounds the line-alignment table of restyle (old lines times
// new lines); larger edits keep only the endings of the lines they leave
// the same at their start and end.
const maxAlign = 1 << 20

// restyle returns repl (LF line breaks) as it goes in place of region
// (the original bytes): each line of repl that is also a line of region,
// in order (a longest common subsequence of lines, the final unbroken
// line included), keeps that line's original ending, CRLF or LF; every
// other line break is CRLF when crlf, else LF.
func restyle(region []byte, repl string, crlf bool) string {
	type line struct {
		text string // without its ending
		nl   bool   // ends with a line break
		end  string // the original ending ("\r\n", "\n" or "")
	}
	var olds []line
	for rest := string(region); rest != ""; {
		i := strings.IndexByte(rest, '\n')
		if i < 0 {
			olds = append(olds, line{text: rest})
			break
		}
		l := line{text: rest[:i], nl: true, end: "\n"}
		if strings.HasSuffix(l.text, "\r") {
			l.text, l.end = l.text[:len(l.text)-1], "\r\n"
		}
		olds = append(olds, l)
		rest = rest[i+1:]
	}
	var news []line
	for rest := repl; rest != ""; {
		i := strings.IndexByte(rest, '\n')
		if i < 0 {
			news = append(news, line{text: rest})
			break
		}
		news = append(news, line{text: rest[:i], nl: true})
		rest = rest[i+1:]
	}
	same := func(o, n line) bool { return o.text == n.text && o.nl == n.nl }
	// match[j] is the old line new line j keeps the ending of, or -1.
	match := make([]int, len(news))
	for j := range match {
		match[j] = -1
	}
	n, m := len(olds), len(news)
	if n*m <= maxAlign {
		// lcs[i*(m+1)+j] is the length of an LCS of olds[i:] and news[j:].
		lcs := make([]int32, (n+1)*(m+1))
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				switch {
				case same(olds[i], news[j]):
					lcs[i*(m+1)+j] = lcs[(i+1)*(m+1)+j+1] + 1
				default:
					lcs[i*(m+1)+j] = max(lcs[(i+1)*(m+1)+j], lcs[i*(m+1)+j+1])
				}
			}
		}
		for i, j := 0, 0; i < n && j < m; {
			switch {
			case same(olds[i], news[j]):
				match[j] = i
				i++
				j++
			case lcs[(i+1)*(m+1)+j] >= lcs[i*(m+1)+j+1]:
				i++
			default:
				j++
			}
		}
	} else {
		for k := 0; k < n && k < m && same(olds[k], news[k]); k++ {
			match[k] = k
		}
		for k := 1; k <= n && k <= m && match[m-k] < 0 && same(olds[n-k], news[m-k]); k++ {
			match[m-k] = n - k
		}
	}
	var b strings.Builder
	b.Grow(len(repl) + len(repl)/8)
	for j, l := range news {
		b.WriteString(l.text)
		switch {
		case !l.nl:
		case match[j] >= 0:
			b.WriteString(olds[match[j]].end)
		case crlf:
			b.WriteString("\r\n")
		default:
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// normalizeCRLF returns body with each CRLF pair as LF, and the sorted
// offsets, in the result, of the LFs that were CRLF.
func normalizeCRLF(body []byte) (string, []int) {
	n := bytes.Count(body, []byte("\r\n"))
	if n == 0 {
		return string(body), nil
	}
	var b strings.Builder
	b.Grow(len(body) - n)
	at := make([]int, 0, n)
	for {
		i := bytes.Index(body, []byte("\r\n"))
		if i < 0 {
			b.Write(body)
			break
		}
		b.Write(body[:i])
		at = append(at, b.Len())
		b.WriteByte('\n')
		body = body[i+2:]
	}
	return b.String(), at
}

// lineNumbers returns the 1-based line of each sorted offset in s.
func lineNumbers(s string, offsets []int) []int {
	out := make([]int, len(offsets))
	line, pos := 1, 0
	for i, off := range offsets {
		line += strings.Count(s[pos:off], "\n")
		pos = off
		out[i] = line
	}
	return out
}

func joinInts(xs []int, max int) string {
	var parts []string
	for i, x := range xs {
		if i == max {
			parts = append(parts, fmt.Sprintf("… (%d more)", len(xs)-max))
			break
		}
		parts = append(parts, strconv.Itoa(x))
	}
	return strings.Join(parts, ",")
}

// snippet shows lines first-2 … first+added+2 of body, numbered as
// read_file numbers them, at most 20 lines.
func snippet(body []byte, first, added int) string {
	norm, _ := normalizeCRLF(body)
	lines := strings.Split(norm, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	from := max(1, first-2)
	to := min(len(lines), first+added+2, from+19)
	var b strings.Builder
	for n := from; n <= to; n++ {
		text, _ := clipLine(tool.Escape(lines[n-1]), 300)
		fmt.Fprintf(&b, "%6d\t%s\n", n, text)
	}
	return b.String()
}

var lineNumberPrefix = lazy.Regexp(`(?m)^ *\d+\t`)

// notFound explains why old does not occur in norm, as specifically as it
// can: copied line numbers, escaped tabs, whitespace or quote
// differences, a newline the file does not end with, or where the first
// line does occur.
func notFound(norm, old, raw string, fileCRLF bool) string {
	msg := notFoundReason(norm, old)
	if fileCRLF && !strings.Contains(raw, "\r\n") {
		msg += ". Note: the file uses CRLF (\\r\\n) line endings and old_string uses LF; line endings are normalised before matching, so that is not the cause"
	}
	return msg
}

func notFoundReason(norm, old string) string {
	lines := strings.Split(norm, "\n")
	oldLines := strings.Split(old, "\n")
	if lineNumberPrefix().MatchString(old) {
		if stripped := lineNumberPrefix().ReplaceAllString(old, ""); strings.Contains(norm, stripped) {
			return "old_string includes the line-number prefixes of read_file's view (the number and the tab after it); leave them out"
		}
	}
	if strings.Contains(old, `\t`) || strings.Contains(old, `\n`) {
		un := strings.NewReplacer(`\t`, "\t", `\n`, "\n").Replace(old)
		if strings.Contains(norm, un) {
			return `old_string contains the two characters \t or \n where the file has a real tab or line break`
		}
	}
	if l, ok := findFuzzy(lines, oldLines, trimTrailing); ok {
		return fmt.Sprintf("old_string was not found exactly; it matches at line %d only when trailing spaces and tabs are ignored, so copy the line ends exactly", l)
	}
	if l, ok := findFuzzy(lines, oldLines, strings.TrimSpace); ok {
		return fmt.Sprintf("old_string was not found exactly; it matches at line %d only when indentation is ignored: %s", l, indentDiff(lines[l-1:], oldLines))
	}
	if l, ok := findFuzzy(lines, oldLines, collapseSpace); ok {
		return fmt.Sprintf("old_string was not found exactly; it matches at line %d only when the spacing inside lines is ignored, so copy the spaces and tabs exactly", l)
	}
	if l, ok := findFuzzy(lines, oldLines, plainPunct); ok {
		return fmt.Sprintf("old_string was not found exactly; it matches at line %d only when quotes, dashes and non-breaking spaces are made plain, so copy those characters exactly", l)
	}
	if trimmed := strings.TrimRight(old, "\n"); trimmed != old && strings.HasSuffix(norm, trimmed) && !strings.HasSuffix(norm, "\n") {
		return "old_string ends with a line break, but the file has no newline at its end; leave the final line break out of old_string and new_string"
	}
	first := strings.TrimSpace(oldLines[0])
	if len(oldLines) > 1 && first != "" {
		var at []int
		for i, l := range lines {
			if strings.Contains(l, first) {
				at = append(at, i+1)
			}
		}
		if len(at) > 0 {
			return fmt.Sprintf("old_string was not found; its first line occurs at line %s but the lines after it differ; read the file there again and copy the text exactly", joinInts(at, 5))
		}
	}
	return "old_string was not found in the file; read the file again and copy the text exactly (it must match character for character, including indentation)"
}

// findFuzzy looks for oldLines in lines after applying f to both: the
// first old line must end a file line, the last must start one, and the
// ones between must equal whole lines. It returns the 1-based line of the
// first match.
func findFuzzy(lines, oldLines []string, f func(string) string) (int, bool) {
	o := make([]string, len(oldLines))
	empty := true
	for i, l := range oldLines {
		o[i] = f(l)
		empty = empty && o[i] == ""
	}
	if empty {
		return 0, false
	}
	for i := 0; i+len(o) <= len(lines); i++ {
		if matchAt(lines[i:i+len(o)], o, f) {
			return i + 1, true
		}
	}
	return 0, false
}

func matchAt(window, o []string, f func(string) string) bool {
	if len(o) == 1 {
		return strings.Contains(f(window[0]), o[0])
	}
	if !strings.HasSuffix(f(window[0]), o[0]) || !strings.HasPrefix(f(window[len(o)-1]), o[len(o)-1]) {
		return false
	}
	for k := 1; k < len(o)-1; k++ {
		if f(window[k]) != o[k] {
			return false
		}
	}
	return true
}

func trimTrailing(s string) string { return strings.TrimRight(s, " \t") }

func collapseSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

var punct = strings.NewReplacer("\u2018", "'", "\u2019", "'", "\u201c", `"`, "\u201d", `"`, "\u2013", "-", "\u2014", "-", "\u00a0", " ", "\u2026", "...")

func plainPunct(s string) string { return collapseSpace(punct.Replace(s)) }

// indentDiff describes how the indentation of the file's lines differs
// from old's, at the first line where both have text.
func indentDiff(file, old []string) string {
	for k := 0; k < len(old) && k < len(file); k++ {
		fi := leading(file[k])
		oi := leading(old[k])
		if strings.TrimSpace(old[k]) == "" || fi == oi {
			continue
		}
		return fmt.Sprintf("the file indents that line with %s, old_string with %s", describeIndent(fi), describeIndent(oi))
	}
	return "copy the indentation exactly"
}

func leading(s string) string { return s[:len(s)-len(strings.TrimLeft(s, " \t"))] }

func describeIndent(s string) string {
	tabs, spaces := strings.Count(s, "\t"), strings.Count(s, " ")
	switch {
	case s == "":
		return "nothing"
	case spaces == 0:
		return plural(tabs, "tab")
	case tabs == 0:
		return plural(spaces, "space")
	}
	return plural(tabs, "tab") + " and " + plural(spaces, "space")
}

func plural(n int, w string) string {
	if n == 1 {
		return "1 " + w
	}
	return strconv.Itoa(n) + " " + w + "s"
}

// Preview returns the content a file-writing call would leave in a file
// that now holds data (nil: it does not exist): for "edit_file" the
// result of its replacement, exactly as the tool would make it, for
// "write_file" the content given. It returns a message instead when the
// call would change nothing or fail (the model's own words for it), so
// that a person approving the call sees the diff it makes.
func Preview(toolName string, args json.RawMessage, data []byte) ([]byte, string) {
	switch toolName {
	case "edit_file":
		var in editInput
		if err := json.Unmarshal(args, &in); err != nil {
			return nil, "the arguments are not valid: " + err.Error()
		}
		if data == nil {
			return nil, "the file does not exist"
		}
		ed, msg := applyEdit(data, in.OldString, in.NewString, in.ReplaceAll)
		if ed == nil {
			return nil, msg
		}
		return ed.out, ""
	case "write_file":
		var in writeInput
		if err := json.Unmarshal(args, &in); err != nil {
			return nil, "the arguments are not valid: " + err.Error()
		}
		return []byte(in.Content), ""
	}
	return nil, toolName + " does not write a file"
}
