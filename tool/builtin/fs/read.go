package fs

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/keel-run/keel/tool"
)

//go:embed read_file.md
var readDescription string

func readTool() *tool.Tool {
	return &tool.Tool{
		Name:        ReadName,
		Description: strings.TrimSpace(readDescription),
		InputSchema: json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "path": {"type": "string", "minLength": 1},
    "offset": {"type": "integer", "minimum": 1},
    "limit": {"type": "integer", "minimum": 1}
  },
  "required": ["path"]
}`),
		Effect: tool.ReadOnly,
		Scope:  pathScope(""),
	}
}

type reader struct{ opts Options }

type readInput struct {
	Path   string  `json:"path"`
	Offset float64 `json:"offset"`
	Limit  float64 `json:"limit"`
}

var bom = []byte("\xef\xbb\xbf")

// sampleSize is how much of a file decides whether it is binary.
const sampleSize = 8192

// openRegular opens a resolved path inside root for reading without
// blocking on a FIFO or device, and checks that it is a regular file. It
// returns the file and its info, or an error result.
func openRegular(root *os.Root, rel, shown string) (*os.File, os.FileInfo, *tool.Result) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, tool.Errorf("cannot read %s: %s", shown, describeErr(err))
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, tool.Errorf("cannot read %s: %s", shown, describeErr(err))
	}
	switch {
	case fi.IsDir():
		f.Close()
		return nil, nil, tool.Errorf("%s is a directory; read_file lists what it contains", shown)
	case !fi.Mode().IsRegular():
		f.Close()
		return nil, nil, tool.Errorf("%s is not a regular file (%s); the file tools read and write regular files only", shown, modeKind(fi.Mode()))
	}
	return f, fi, nil
}

func modeKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "a special file"
}

// binaryRefusal returns an error result if the file starting with sample
// is binary.
func binaryRefusal(shown string, sample []byte, size int64, verb string) *tool.Result {
	if !isBinary(sample) {
		return nil
	}
	return tool.Errorf("%s is a binary file (%s, %s bytes); %s works on text only. Inspect it with bash instead (file, xxd | head, or a format-specific tool).",
		shown, fileType(sample), commas(size), verb)
}

func (r *reader) handle(ctx context.Context, req *tool.Request) (*tool.Result, error) {
	ws, bad := workspace(req)
	if bad != nil {
		return bad, nil
	}
	var in readInput
	if err := json.Unmarshal(req.Arguments, &in); err != nil {
		return tool.Errorf("invalid arguments for read_file: %v", err), nil
	}
	shown := tool.Escape(in.Path)
	root := ws.FS()
	rel, inState := ws.ArtifactRel(in.Path)
	var err error
	if inState {
		// A whole output in Keel's state directory, named in a result.
		root = ws.State()
	} else if rel, err = ws.Resolve(in.Path); err != nil {
		return tool.Errorf("cannot read %s: %s", shown, describeErr(err)), nil
	} else if fi, err := root.Stat(rel); err == nil && fi.IsDir() {
		return listDir(ctx, req, ws, rel, shown, 1, r.opts.MaxListEntries)
	}
	f, fi, res := openRegular(root, rel, shown)
	if res != nil {
		return res, nil
	}
	defer f.Close()
	sample := make([]byte, sampleSize)
	n, err := io.ReadFull(f, sample)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return tool.Errorf("cannot read %s: %s", shown, describeErr(err)), nil
	}
	if res := binaryRefusal(shown, sample[:n], fi.Size(), "read_file"); res != nil {
		return res, nil
	}
	if fi.Size() == 0 {
		return tool.Text(fmt.Sprintf("%s is empty (0 bytes)", shown)), nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return tool.Errorf("cannot read %s: %s", shown, describeErr(err)), nil
	}
	offset, limit := int(in.Offset), int(in.Limit)
	if offset < 1 {
		offset = 1
	}
	if limit < 1 {
		limit = r.opts.ReadLines
	}
	budget := maxChars(req.Env) - 400
	lr := newLineReader(f, 4*r.opts.MaxLineChars+16)
	var (
		b               strings.Builder
		runes           int
		no, from, to    int
		cut             bool
		crlf, hasBOM    bool
		invalid, endsNL bool
		clipped         bool
	)
	for {
		l, err := lr.next()
		if err != nil && !errors.Is(err, io.EOF) {
			return tool.Errorf("cannot read %s: %s", shown, describeErr(err)), nil
		}
		if l.full == 0 && !l.nl && err != nil {
			break
		}
		no++
		endsNL = l.nl
		line := l.text
		if no == 1 && bytes.HasPrefix(line, bom) {
			hasBOM, line = true, line[len(bom):]
		}
		crlf = crlf || l.cr
		if no >= offset && no-offset < limit && !cut {
			if !utf8.Valid(line) {
				invalid = true
			}
			text, more := clipLine(tool.Escape(string(line)), r.opts.MaxLineChars)
			if more > 0 || l.full > len(l.text) {
				clipped = true
				text += fmt.Sprintf(" [… line clipped: %s bytes in all]", commas(int64(l.full)))
			}
			entry := fmt.Sprintf("%6d\t%s\n", no, text)
			er := utf8.RuneCountInString(entry)
			if from > 0 && runes+er > budget {
				cut = true
			} else {
				b.WriteString(entry)
				runes += er
				if from == 0 {
					from = no
				}
				to = no
			}
		}
		if err != nil {
			break
		}
		if no%16384 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	total := no
	if offset > total {
		return tool.Errorf("offset %d is past the end: %s has %d lines", offset, shown, total), nil
	}
	var notes []string
	if to < total {
		why := ""
		if cut {
			why = " (the result size limit)"
		}
		notes = append(notes, fmt.Sprintf("[showing lines %d-%d of %d%s; continue with offset=%d]", from, to, total, why, to+1))
	}
	if to == total && !endsNL {
		notes = append(notes, "[no newline at end of file]")
	}
	if crlf {
		notes = append(notes, "[the file uses CRLF line endings, not shown; edit_file matches and keeps them]")
	}
	if hasBOM {
		notes = append(notes, "[the file starts with a UTF-8 byte-order mark, not shown; edits keep it]")
	}
	if invalid {
		notes = append(notes, "[bytes that are not valid UTF-8 are shown as U+FFFD]")
	}
	if clipped {
		notes = append(notes, fmt.Sprintf("[lines longer than %d characters are clipped; use bash (cut, fold) to see them whole]", r.opts.MaxLineChars))
	}
	for _, n := range notes {
		b.WriteString(n)
		b.WriteByte('\n')
	}
	return tool.Text(b.String()), nil
}

// clipLine cuts s to max runes; it returns the rest's length in runes.
func clipLine(s string, max int) (string, int) {
	if len(s) <= max {
		return s, 0
	}
	n := 0
	for i := range s {
		if n == max {
			return s[:i], utf8.RuneCountInString(s[i:])
		}
		n++
	}
	return s, 0
}

// line is one line from a lineReader.
type line struct {
	text []byte // at most keep bytes, without "\n" or a CRLF's "\r"
	full int    // the whole line's length in bytes, without its ending
	nl   bool   // ended by "\n"
	cr   bool   // ended by "\r\n"
}

// lineReader reads lines of any length with bounded memory, keeping the
// first keep bytes of each.
type lineReader struct {
	r    *bufio.Reader
	keep int
	buf  []byte
}

func newLineReader(r io.Reader, keep int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), keep: keep}
}

// next returns the next line; err is io.EOF after the last one (which is
// returned with it when it has no newline).
func (lr *lineReader) next() (line, error) {
	lr.buf = lr.buf[:0]
	var l line
	var last byte
	for {
		chunk, err := lr.r.ReadSlice('\n')
		if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
			l.nl = true
			chunk = chunk[:len(chunk)-1]
		}
		if len(chunk) > 0 {
			last = chunk[len(chunk)-1]
		}
		l.full += len(chunk)
		if room := lr.keep - len(lr.buf); room > 0 {
			lr.buf = append(lr.buf, chunk[:min(room, len(chunk))]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if l.nl && last == '\r' && l.full > 0 {
			l.cr = true
			l.full--
			if len(lr.buf) > l.full {
				lr.buf = lr.buf[:l.full]
			}
		}
		l.text = lr.buf
		if err != nil {
			return l, err
		}
		return l, nil
	}
}

// commas formats n with thousands separators.
func commas(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && c != '-' && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
