package fs

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	iofs "io/fs"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/keel-run/keel/tool"
)

//go:embed list_directory.md
var listDescription string

// MaxListDepth is the deepest list_directory goes.
const MaxListDepth = 10

// listTool is list_directory, retired: read_file lists a directory. It
// stays registered, unlisted, for the runs that were offered it.
func listTool() *tool.Tool {
	return &tool.Tool{
		Name:        ListName,
		Unlisted:    true,
		Description: strings.TrimSpace(listDescription),
		InputSchema: json.RawMessage(fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "path": {"type": "string"},
    "depth": {"type": "integer", "minimum": 1, "maximum": %d}
  }
}`, MaxListDepth)),
		Effect: tool.ReadOnly,
		Scope:  pathScope("."),
	}
}

type lister struct{ opts Options }

type listInput struct {
	Path  string  `json:"path"`
	Depth float64 `json:"depth"`
}

func (l *lister) handle(ctx context.Context, req *tool.Request) (*tool.Result, error) {
	ws, bad := workspace(req)
	if bad != nil {
		return bad, nil
	}
	var in listInput
	if err := json.Unmarshal(req.Arguments, &in); err != nil {
		return tool.Errorf("invalid arguments for list_directory: %v", err), nil
	}
	if in.Path == "" {
		in.Path = "."
	}
	depth := min(max(int(in.Depth), 1), MaxListDepth)
	shown := tool.Escape(in.Path)
	rel, err := ws.Resolve(in.Path)
	if err != nil {
		return tool.Errorf("cannot list %s: %s", shown, describeErr(err)), nil
	}
	fi, err := ws.FS().Stat(rel)
	if err != nil {
		return tool.Errorf("cannot list %s: %s", shown, describeErr(err)), nil
	}
	if !fi.IsDir() {
		return tool.Errorf("%s is not a directory (a file of %s bytes); use read_file to read it", shown, commas(fi.Size())), nil
	}
	return listDir(ctx, req, ws, rel, shown, depth, l.opts.MaxListEntries)
}

// listDir lists the directory rel of ws (shown as shown) depth levels
// deep, at most max entries: list_directory's result, and read_file's
// for a directory.
func listDir(ctx context.Context, req *tool.Request, ws *tool.Workspace, rel, shown string, depth, max int) (*tool.Result, error) {
	w := &listWalk{ws: ws, max: max, budget: maxChars(req.Env) - 200}
	if err := w.walk(ctx, rel, 0, depth); err != nil {
		return nil, err
	}
	if w.top != nil {
		return tool.Errorf("cannot list %s: %s", shown, describeErr(w.top)), nil
	}
	if w.n == 0 && w.errs == 0 {
		return tool.Text(shown + " is empty"), nil
	}
	if w.more > 0 {
		hint := "list a subdirectory or use a smaller depth"
		if depth == 1 {
			hint = "list a subdirectory, or use bash (ls, find) to filter"
		}
		fmt.Fprintf(&w.b, "[… %d more entries not shown; %s]\n", w.more, hint)
	}
	return tool.Text(w.b.String()), nil
}

type listWalk struct {
	ws     *tool.Workspace
	b      strings.Builder
	runes  int
	n      int // entries shown
	more   int // entries not shown
	errs   int
	top    error // the listed directory itself could not be read
	max    int
	budget int
}

func (w *listWalk) add(line string) bool {
	r := utf8.RuneCountInString(line) + 1
	if w.n >= w.max || w.runes+r > w.budget {
		w.more++
		return false
	}
	w.b.WriteString(line)
	w.b.WriteByte('\n')
	w.runes += r
	w.n++
	return true
}

func (w *listWalk) walk(ctx context.Context, dir string, level, depth int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := w.ws.FS().Open(dir)
	if err != nil && level == 0 {
		w.top = err
		return nil
	}
	if err != nil {
		w.errs++
		w.add(fmt.Sprintf("%s[cannot open: %s]", strings.Repeat("  ", level), describeErr(err)))
		return nil
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil && len(entries) == 0 && level == 0 {
		w.top = err
		return nil
	}
	if err != nil && len(entries) == 0 {
		w.errs++
		w.add(fmt.Sprintf("%s[cannot read: %s]", strings.Repeat("  ", level), describeErr(err)))
		return nil
	}
	slices.SortFunc(entries, func(a, b iofs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	indent := strings.Repeat("  ", level)
	for _, e := range entries {
		name := tool.Escape(e.Name())
		child := path.Join(dir, e.Name())
		switch {
		case w.ws.Hidden(child):
			continue // forbidden by the run's policy
		case e.Type()&iofs.ModeSymlink != 0:
			target, err := w.ws.FS().Readlink(child)
			if err != nil {
				target = "?"
			}
			note := ""
			if _, err := w.ws.Resolve(child); err != nil {
				note = "  (leads outside the workspace or is broken)"
			}
			w.add(fmt.Sprintf("%s%s -> %s%s", indent, name, tool.Escape(target), note))
		case e.IsDir():
			if !w.add(indent + name + "/") {
				continue
			}
			if level+1 < depth && e.Name() != ".git" {
				if err := w.walk(ctx, child, level+1, depth); err != nil {
					return err
				}
			}
		default:
			info, err := e.Info()
			size := ""
			if err == nil {
				if info.Mode().IsRegular() {
					size = "  (" + humanSize(info.Size()) + ")"
				} else {
					size = "  (" + modeKind(info.Mode()) + ")"
				}
			}
			w.add(indent + name + size)
		}
	}
	return nil
}

// humanSize formats a byte count: "512 B", "1.2 KB", "3.4 MB".
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "KMGTPE"[exp])
}
