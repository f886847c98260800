package fs

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	ignore "github.com/sabhiram/go-gitignore"

	"github.com/keel-run/keel/tool"
)

//go:embed search_files.md
var searchDescription string

func searchTool() *tool.Tool {
	return &tool.Tool{
		Name:        SearchName,
		Description: strings.TrimSpace(searchDescription),
		InputSchema: json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "pattern": {"type": "string", "minLength": 1},
    "path": {"type": "string"},
    "glob": {"type": "string"}
  },
  "required": ["pattern"]
}`),
		Effect: tool.ReadOnly,
		Scope:  pathScope("."),
	}
}

type searcher struct{ opts Options }

type searchInput struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path"`
	Glob    string `json:"glob"`
}

// ignoreFrame is the .gitignore of one directory.
type ignoreFrame struct {
	dir string // workspace-relative
	gi  *ignore.GitIgnore
}

type search struct {
	ws       *tool.Workspace
	opts     Options
	re       *regexp.Regexp
	globs    []string
	base     string // the searched directory
	out      strings.Builder
	runes    int
	budget   int
	shown    int
	matches  int
	files    int // files with a match
	searched int
	binary   int
	large    int
	ignored  int
	links    int
	partial  int // lines longer than what is kept, searched in part
	errs     int
}

func (s *searcher) handle(ctx context.Context, req *tool.Request) (*tool.Result, error) {
	ws, bad := workspace(req)
	if bad != nil {
		return bad, nil
	}
	var in searchInput
	if err := json.Unmarshal(req.Arguments, &in); err != nil {
		return tool.Errorf("invalid arguments for search_files: %v", err), nil
	}
	re, err := regexp.Compile(in.Pattern)
	if err != nil {
		return tool.Errorf("invalid pattern: %v (the syntax is RE2: no look-around or back-references)", err), nil
	}
	globs, err := compileGlob(in.Glob)
	if err != nil {
		return tool.Errorf("invalid glob %q: %v", in.Glob, err), nil
	}
	if in.Path == "" {
		in.Path = "."
	}
	shown := tool.Escape(in.Path)
	rel, err := ws.Resolve(in.Path)
	if err != nil {
		return tool.Errorf("cannot search %s: %s", shown, describeErr(err)), nil
	}
	fi, err := ws.FS().Stat(rel)
	if err != nil {
		return tool.Errorf("cannot search %s: %s", shown, describeErr(err)), nil
	}
	sr := &search{ws: ws, opts: s.opts, re: re, globs: globs, base: rel, budget: maxChars(req.Env) - 400}
	if fi.IsDir() {
		if err := sr.walk(ctx, rel, sr.ancestorsIgnores(rel)); err != nil {
			return nil, err
		}
	} else {
		sr.file(rel, fi.Size())
	}
	return tool.Text(sr.summary(in.Pattern, shown)), nil
}

// ancestorsIgnores loads the .gitignore files (and .git/info/exclude) that
// apply to dir from the directories above it.
func (s *search) ancestorsIgnores(dir string) []ignoreFrame {
	var st []ignoreFrame
	if b, err := tool.ReadRegular(s.ws.FS(), ".git/info/exclude", maxIgnoreBytes); err == nil {
		st = append(st, ignoreFrame{".", ignore.CompileIgnoreLines(strings.Split(string(b), "\n")...)})
	}
	if dir == "." {
		return st
	}
	cur := "."
	for part := range strings.SplitSeq(dir, "/") {
		if f, ok := s.loadIgnore(cur); ok {
			st = append(st, f)
		}
		cur = path.Join(cur, part)
	}
	return st
}

// maxIgnoreBytes bounds the part of an ignore file that is read: the
// workspace is the agent's, and an ignore file may be a FIFO or huge.
const maxIgnoreBytes = 1 << 20

func (s *search) loadIgnore(dir string) (ignoreFrame, bool) {
	b, err := tool.ReadRegular(s.ws.FS(), path.Join(dir, ".gitignore"), maxIgnoreBytes)
	if err != nil {
		return ignoreFrame{}, false
	}
	return ignoreFrame{dir, ignore.CompileIgnoreLines(strings.Split(string(b), "\n")...)}, true
}

func isIgnored(stack []ignoreFrame, rel string, dir bool) bool {
	for _, f := range stack {
		p := rel
		if f.dir != "." {
			var ok bool
			if p, ok = strings.CutPrefix(rel, f.dir+"/"); !ok {
				continue
			}
		}
		if dir {
			p += "/"
		}
		if f.gi.MatchesPath(p) {
			return true
		}
	}
	return false
}

func (s *search) walk(ctx context.Context, dir string, stack []ignoreFrame) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := s.ws.FS().Open(dir)
	if err != nil {
		s.errs++
		return nil
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil && len(entries) == 0 {
		s.errs++
		return nil
	}
	slices.SortFunc(entries, func(a, b iofs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	if fr, ok := s.loadIgnore(dir); ok {
		stack = append(stack[:len(stack):len(stack)], fr)
	}
	for _, e := range entries {
		child := path.Join(dir, e.Name())
		switch {
		case e.Name() == ".git" && e.IsDir():
			continue
		case s.ws.Hidden(child):
			continue // forbidden by the run's policy
		case e.Type()&iofs.ModeSymlink != 0:
			s.links++
			continue
		case isIgnored(stack, child, e.IsDir()):
			s.ignored++
			continue
		case e.IsDir():
			if err := s.walk(ctx, child, stack); err != nil {
				return err
			}
		case e.Type().IsRegular():
			if !s.globMatch(child) {
				continue
			}
			info, err := e.Info()
			if err != nil {
				s.errs++
				continue
			}
			s.file(child, info.Size())
		}
	}
	return nil
}

func (s *search) globMatch(rel string) bool {
	if len(s.globs) == 0 {
		return true
	}
	fromBase := rel
	if s.base != "." {
		fromBase = strings.TrimPrefix(rel, s.base+"/")
	}
	for _, g := range s.globs {
		if !strings.Contains(g, "/") {
			if ok, _ := path.Match(g, path.Base(rel)); ok {
				return true
			}
			continue
		}
		g = strings.TrimPrefix(g, "/")
		if matchPath(strings.Split(g, "/"), strings.Split(fromBase, "/")) || matchPath(strings.Split(g, "/"), strings.Split(rel, "/")) {
			return true
		}
	}
	return false
}

// matchPath matches path components against glob components where "**"
// matches any number of components.
func matchPath(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchPath(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// compileGlob expands one level of braces ("*.{go,md}") and checks the
// patterns' syntax.
func compileGlob(g string) ([]string, error) {
	if g == "" {
		return nil, nil
	}
	pats := []string{g}
	if i := strings.IndexByte(g, '{'); i >= 0 {
		j := strings.IndexByte(g[i:], '}')
		if j < 0 {
			return nil, errors.New("unclosed {")
		}
		pats = pats[:0]
		for alt := range strings.SplitSeq(g[i+1:i+j], ",") {
			pats = append(pats, g[:i]+alt+g[i+j+1:])
		}
	}
	for _, p := range pats {
		if _, err := path.Match(p, ""); err != nil {
			return nil, err
		}
	}
	return pats, nil
}

// file searches one file.
func (s *search) file(rel string, size int64) {
	if size > s.opts.MaxSearchBytes {
		s.large++
		return
	}
	f, _, res := openRegular(s.ws.FS(), rel, rel)
	if res != nil {
		s.errs++
		return
	}
	defer f.Close()
	sample := make([]byte, sampleSize)
	n, _ := io.ReadFull(f, sample)
	if isBinary(sample[:n]) {
		s.binary++
		return
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		s.errs++
		return
	}
	s.searched++
	keep := 4*s.opts.MaxLineChars + 16
	lr := newLineReader(f, keep)
	found := false
	for no := 1; ; no++ {
		l, err := lr.next()
		if l.full == 0 && !l.nl && err != nil {
			break
		}
		if l.full > len(l.text) {
			s.partial++
		}
		if s.re.Match(l.text) {
			s.matches++
			found = true
			s.show(rel, no, l.text)
		}
		if err != nil {
			break
		}
	}
	if found {
		s.files++
	}
}

// show adds a match line if the bounds allow.
func (s *search) show(rel string, no int, text []byte) {
	if s.shown >= s.opts.MaxMatches {
		return
	}
	t, more := clipLine(tool.Escape(string(text)), min(s.opts.MaxLineChars, 300))
	if more > 0 {
		t += " […]"
	}
	line := fmt.Sprintf("%s:%d: %s\n", tool.Escape(rel), no, t)
	r := utf8.RuneCountInString(line)
	if s.runes+r > s.budget {
		s.shown = s.opts.MaxMatches // stop showing; keep counting
		return
	}
	s.out.WriteString(line)
	s.runes += r
	s.shown++
}

func (s *search) summary(pattern, where string) string {
	var b strings.Builder
	shownLines := strings.Count(s.out.String(), "\n")
	if s.matches == 0 {
		fmt.Fprintf(&b, "no matches for %s in %s (%d files searched)", tool.Escape(pattern), where, s.searched)
	} else {
		b.WriteString(s.out.String())
		fmt.Fprintf(&b, "[%d %s in %d %s", s.matches, pluralWord(s.matches, "match", "matches"), s.files, pluralWord(s.files, "file", "files"))
		if shownLines < s.matches {
			fmt.Fprintf(&b, "; showing the first %d: narrow the pattern, path or glob to see more", shownLines)
		}
		b.WriteString("]")
	}
	var skipped []string
	for _, k := range []struct {
		n    int
		what string
	}{
		{s.ignored, "ignored by .gitignore"},
		{s.binary, "binary"},
		{s.large, fmt.Sprintf("larger than %s", humanSize(s.opts.MaxSearchBytes))},
		{s.links, "symbolic links (not followed)"},
		{s.errs, "unreadable"},
	} {
		if k.n > 0 {
			skipped = append(skipped, fmt.Sprintf("%d %s", k.n, k.what))
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(&b, "\n[skipped: %s]", strings.Join(skipped, ", "))
	}
	if s.partial > 0 {
		fmt.Fprintf(&b, "\n[%d very long lines were searched only in their first %d bytes]", s.partial, 4*s.opts.MaxLineChars+16)
	}
	return b.String()
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
