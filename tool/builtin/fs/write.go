package fs

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path"
	"strings"

	"github.com/keel-run/keel/tool"
)

//go:embed write_file.md
var writeDescription string

func writeTool() *tool.Tool {
	return &tool.Tool{
		Name:        WriteName,
		Description: strings.TrimSpace(writeDescription),
		InputSchema: json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "path": {"type": "string", "minLength": 1},
    "content": {"type": "string"}
  },
  "required": ["path", "content"]
}`),
		Effect: tool.WorkspaceWrite,
		Scope:  pathScope(""),
		State:  fileState,
	}
}

type writer struct{ opts Options }

type writeInput struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

func (w *writer) handle(ctx context.Context, req *tool.Request) (*tool.Result, error) {
	ws, bad := workspace(req)
	if bad != nil {
		return bad, nil
	}
	var in writeInput
	if err := json.Unmarshal(req.Arguments, &in); err != nil {
		return tool.Errorf("invalid arguments for write_file: %v", err), nil
	}
	shown := tool.Escape(in.Path)
	rel, err := ws.ResolveWrite(in.Path)
	if err != nil {
		return tool.Errorf("cannot write %s: %s", shown, describeErr(err)), nil
	}
	tgt, err := openTarget(ws, rel, true)
	if err != nil {
		return tool.Errorf("cannot write %s: %s", shown, describeErr(err)), nil
	}
	defer tgt.dir.Close()
	old, err := tgt.dir.Lstat(tgt.base)
	switch {
	case err == nil && old.IsDir():
		return tool.Errorf("cannot write %s: it is a directory", shown), nil
	case err == nil && old.Mode()&os.ModeSymlink != 0:
		return tool.Errorf("cannot write %s: %s", shown, describeErr(errChanged)), nil
	case err == nil && !old.Mode().IsRegular():
		return tool.Errorf("cannot write %s: it is %s, not a regular file", shown, modeKind(old.Mode())), nil
	case err != nil && !errors.Is(err, iofs.ErrNotExist):
		return tool.Errorf("cannot write %s: %s", shown, describeErr(err)), nil
	}
	if err := writeAtomic(tgt.dir, tgt.base, []byte(in.Content), old); err != nil {
		return tool.Errorf("cannot write %s: %s; the file was not changed", shown, describeErr(err)), nil
	}
	verb := "created"
	if old != nil {
		verb = "replaced"
	}
	lines := countLines(in.Content)
	msg := fmt.Sprintf("%s %s: %s bytes, %d %s", verb, shown, commas(int64(len(in.Content))), lines, pluralWord(lines, "line", "lines"))
	if lex, err := ws.Rel(in.Path); err == nil && lex != rel {
		msg += fmt.Sprintf(" (written to %s, where the path's links lead)", tool.Escape(rel))
	}
	return tool.Text(msg), nil
}

func countLines(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// target is a file about to be written, held through its directory.
type target struct {
	dir  *os.Root // the parent directory, opened and verified
	base string   // the file's name in dir
}

// errChanged reports a path that changed between its check and its use.
var errChanged = errors.New("the path changed while it was being written (a link was swapped in); nothing was written, try again")

// testHook runs at the two moments of openTarget when a swapped link
// matters most ("before-open", "after-open"); tests use it to swap one in.
var testHook = func(stage string) {}

// openTarget opens the parent directory of rel, a path that
// [tool.Workspace.ResolveWrite] returned, creating it first if mkdir is
// set. It then checks that the directory it holds is still the real,
// unprotected location of rel's parent, so a link swapped in at any
// moment cannot redirect the write: every later access is relative to
// the held directory, by name only. It returns an error wrapping
// errChanged when the path changed.
func openTarget(ws *tool.Workspace, rel string, mkdir bool) (*target, error) {
	dir, base := path.Dir(rel), path.Base(rel)
	if mkdir && dir != "." {
		if err := ws.FS().MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating its directory: %w", err)
		}
	}
	testHook("before-open")
	d, err := ws.FS().OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	testHook("after-open")
	held, err1 := d.Stat(".")
	now, err2 := ws.FS().Lstat(dir)
	again, err3 := ws.ResolveWrite(rel)
	if err := errors.Join(err1, err2); err != nil {
		d.Close()
		return nil, err
	}
	if err3 != nil || again != rel || !os.SameFile(held, now) {
		d.Close()
		return nil, errChanged
	}
	return &target{dir: d, base: base}, nil
}

// writeAtomic replaces rel (inside root) with data: it writes a temporary
// file in the same directory, syncs it, gives it old's mode (and owner,
// where allowed) and renames it over rel, so rel is always either the old
// or the new content. old is rel's current info, or nil for a new file
// (mode 0644). On any error the temporary file is removed and rel is
// untouched.
//
// A rename makes a new file: a file with other hard links would be split
// from them (the other names keep the old content), and a file whose
// owner this process cannot give away would change owner. Such a file is
// rewritten in place instead (see writeInPlace): same inode, every link
// sees the change, mode and owner untouched.
func writeAtomic(root *os.Root, rel string, data []byte, old os.FileInfo) (err error) {
	if old != nil && links(old) > 1 {
		return writeInPlace(root, rel, data, old)
	}
	dir, base := path.Split(rel)
	if len(base) > 200 {
		base = base[:200]
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := dir + "." + base + ".keel-" + hex.EncodeToString(rnd[:]) + ".tmp"
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			root.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if old != nil {
		mode = old.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
		if !keepOwner(f, old) {
			f.Close()
			root.Remove(tmp)
			return writeInPlace(root, rel, data, old)
		}
	}
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = root.Rename(tmp, rel); err != nil {
		return err
	}
	if d, derr := root.Open(path.Dir(rel)); derr == nil {
		d.Sync() // make the rename durable; best effort
		d.Close()
	}
	return nil
}

// writeInPlace overwrites the existing file rel with data through its
// own inode, after checking that rel is still the file old describes (a
// file swapped in meanwhile is not written: errChanged). It is not
// atomic: a crash in the middle leaves part of the new content.
func writeInPlace(root *os.Root, rel string, data []byte, old os.FileInfo) error {
	f, err := root.OpenFile(rel, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	now, err := f.Stat()
	if err != nil {
		return err
	}
	if !os.SameFile(now, old) || !now.Mode().IsRegular() {
		return errChanged
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return err
	}
	if err := f.Truncate(int64(len(data))); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}
