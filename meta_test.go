package keel_test

import (
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type goPackage struct {
	ImportPath string
	Dir        string
	Name       string
	Doc        string
	GoFiles    []string
	Deps       []string
	Imports    []string
}

func listPackages(t *testing.T, patterns ...string) []goPackage {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-e", "-json"}, patterns...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []goPackage
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// Every package has a doc comment starting "Package NAME" (or "Command"
// for main packages), as tailscale's pkgdoc_test checks.
func TestEveryPackageHasDoc(t *testing.T) {
	for _, p := range listPackages(t, "./...") {
		if len(p.GoFiles) == 0 {
			continue
		}
		fset := token.NewFileSet()
		found := false
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc == nil {
				continue
			}
			text := af.Doc.Text()
			want := "Package " + p.Name + " "
			if p.Name == "main" {
				want = "Command "
			}
			if !strings.HasPrefix(text, want) {
				t.Errorf("%s: doc comment in %s starts %q, want %q", p.ImportPath, f, firstWords(text), want)
			}
			found = true
		}
		if !found {
			t.Errorf("%s has no package doc comment", p.ImportPath)
		}
	}
}

func firstWords(s string) string {
	if len(s) > 30 {
		return s[:30]
	}
	return s
}

// The dependency direction of docs/architecture.md: the agent imports no
// storage driver, no HTTP server package and no CLI (net/http itself
// arrives with the model clients); library packages import
// neither internal/cli nor internal/config.
func TestDependencyBoundaries(t *testing.T) {
	const mod = "github.com/keel-run/keel/"
	for _, tt := range []struct {
		pkg    string
		banned []string
	}{
		{"./agent", []string{"modernc.org/sqlite", "github.com/jackc/pgx/v5", mod + "journal/sqlite", mod + "internal/cli", mod + "internal/config", mod + "server", mod + "sandbox/linux", mod + "model/openai", mod + "model/anthropic"}},
		{"./journal", []string{"modernc.org/sqlite", "net/http", mod + "agent"}},
		{"./model", []string{mod + "agent", mod + "journal", mod + "tool", mod + "model/openai", mod + "model/anthropic"}},
		{"./tool", []string{mod + "agent", mod + "journal", mod + "credential", mod + "internal/cli"}},
		{"./sandbox", []string{mod + "agent", mod + "journal", mod + "tool"}},
		{"./policy", []string{"net/http", "os/exec", mod + "agent", mod + "journal"}},
		// The bash analysis knows commands, not Cedar nor the engine.
		{"./policy/bash", []string{"net/http", "os/exec", "github.com/cedar-policy/cedar-go", mod + "policy", mod + "agent", mod + "journal"}},
		{"./model/openai", []string{"github.com/anthropics/anthropic-sdk-go/v2", mod + "model/anthropic"}},
		{"./model/anthropic", []string{"github.com/openai/openai-go/v3", mod + "model/openai"}},
		// The service is under every front end: the front ends (the HTTP
		// server and web UI, the command line, the Go client, Keel's MCP
		// server) import it, never the other way round; and it knows the
		// cluster only as its Dispatcher interface.
		{"./service", []string{mod + "server", mod + "server/ui", mod + "internal/cli", mod + "client", mod + "cluster", mod + "internal/assemble", mod + "internal/assemble/builder", mod + "internal/mcpserver"}},
		{"./internal/assemble", []string{mod + "internal/cli", mod + "server", mod + "service", mod + "client"}},
		// The builder joins the service and the assembler for a process:
		// no front end, no flags.
		{"./internal/assemble/builder", []string{mod + "internal/cli", mod + "server", mod + "server/ui", mod + "client", mod + "internal/mcpserver", mod + "cmd/keel", "github.com/spf13/cobra"}},
		// Keel's MCP server is a front end beside the others: it reaches
		// runs through the service (locally) or the Go client (a team
		// server), never through the command line or the HTTP server's
		// handlers, and reads no flags or configuration.
		{"./internal/mcpserver", []string{mod + "internal/cli", mod + "internal/config", mod + "server", mod + "server/ui", mod + "cmd/keel", "github.com/spf13/cobra", "flag"}},
		// The terminal front end prints: it reads no flag and knows no
		// other front end.
		{"./internal/tui", []string{mod + "internal/cli", mod + "server", mod + "client", "github.com/spf13/cobra"}},
		// A run executed at the terminal: the terminal's printing over the
		// runtime and the assembled parts, with no front end and no flags.
		{"./internal/foreground", []string{mod + "internal/cli", mod + "server", mod + "client", mod + "internal/mcpserver", "github.com/spf13/cobra"}},
		// Evaluations on this machine: the work of keel eval and keel runs
		// replay, under the command line, with no front end and no flags.
		{"./internal/evalrun", []string{mod + "internal/cli", mod + "server", mod + "client", mod + "internal/mcpserver", "github.com/spf13/cobra"}},
		// Keel's skills on this machine: under the command line, beside
		// the service (its SkillHost), with no front end and no flags.
		{"./internal/skillhost", []string{mod + "internal/cli", mod + "server", mod + "client", mod + "internal/mcpserver", "github.com/spf13/cobra"}},
		// keel mcp call is Keel's MCP client alone: no front end, no flags.
		{"./internal/mcpcall", []string{mod + "internal/cli", mod + "internal/config", mod + "server", mod + "service", mod + "client", "github.com/spf13/cobra"}},
		{"./internal/connect", []string{mod + "internal/cli", mod + "internal/config", mod + "server", mod + "service", mod + "client", "github.com/spf13/cobra"}},
		// keel serve, keel worker and keel scheduler's processes: they
		// host the HTTP and MCP front ends over the service; the command
		// line parses their flags.
		{"./internal/serve", []string{mod + "internal/cli", "github.com/spf13/cobra"}},
	} {
		pkgs := listPackages(t, tt.pkg)
		if len(pkgs) != 1 {
			t.Fatalf("go list %s: %d packages", tt.pkg, len(pkgs))
		}
		for _, b := range tt.banned {
			if slices.Contains(pkgs[0].Deps, b) {
				t.Errorf("%s depends on %s", tt.pkg, b)
			}
		}
	}
	// The front ends (the HTTP server and web UI, the command line, Keel's
	// MCP server, the keel command) stand on the service: each imports
	// it, and none is imported by the service (above) or by another
	// library package.
	for _, p := range listPackages(t, "./server", "./internal/cli", "./internal/mcpserver", "./internal/serve", "./cmd/keel") {
		if !slices.Contains(p.Deps, mod+"service") {
			t.Errorf("front end %s does not reach the service", p.ImportPath)
		}
	}
	frontEnds := []string{mod + "server", mod + "server/ui", mod + "internal/cli", mod + "internal/mcpserver", mod + "internal/serve", mod + "cmd/keel"}
	for _, p := range listPackages(t, "./...") {
		if slices.Contains(frontEnds, p.ImportPath) || strings.HasSuffix(p.ImportPath, "keel-run/keel") {
			continue
		}
		for _, imp := range p.Imports {
			if slices.Contains(frontEnds, imp) {
				t.Errorf("%s imports the front end %s", p.ImportPath, imp)
			}
		}
	}
	// The security helpers any package may use import only the standard
	// library.
	for _, p := range listPackages(t, "./redact") {
		for _, d := range p.Deps {
			if first, _, _ := strings.Cut(d, "/"); strings.Contains(first, ".") {
				t.Errorf("%s depends on %s: it may import only the standard library", p.ImportPath, d)
			}
		}
	}
	// No library package reads flags or configuration.
	for _, p := range listPackages(t, "./...") {
		if strings.Contains(p.ImportPath, "/internal/") || strings.HasSuffix(p.ImportPath, "/cmd/keel") || strings.HasSuffix(p.ImportPath, "keel-run/keel") {
			continue
		}
		for _, imp := range p.Imports {
			if imp == mod+"internal/cli" || imp == mod+"internal/config" || imp == "flag" || imp == "github.com/spf13/cobra" {
				t.Errorf("library package %s imports %s", p.ImportPath, imp)
			}
		}
	}
}

// Nothing in the repository cites a file that is not in it: the design
// of record is docs/architecture.md, not a document beside the clone. The
// test reads the comments of every .go file and the whole of every .md,
// .sh and .py file (outside testdata) and checks each path-like word:
//
//   - a path under a top-level entry of the repository (agent/step.go,
//     docs/policy.md, tool/builtin/{fs,shell}, internal/cli/...) must
//     exist, relative to the root or to the citing file's directory;
//   - a project document named in capitals (README.md, AGENTS.md) must
//     exist beside the citing file, in a parent directory or at the root;
//     the memory files Keel reads from a user's workspace are the only
//     exception ([workspaceFiles]);
//   - a path that climbs out with "../" must stay inside the repository
//     and exist (in comments, only when it names a document or source
//     file: "../.." in a comment about git's commondir is not a citation);
//   - an absolute path must not lead into the team's machine (its shared
//     work directory) or to a document or source file (a ".md" or ".go"
//     outside the clone is somebody else's file).
//
// URLs are skipped: they are how to cite something outside.
func TestNoDanglingFileReferences(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); n != ".git" {
			top[n] = true
		}
	}
	var bad []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (n == ".git" || n == "testdata" || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		var texts []string
		switch filepath.Ext(p) {
		case ".go":
			texts, err = goComments(p)
			if err != nil {
				return err
			}
		case ".md", ".sh", ".py":
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			texts = []string{string(b)}
		default:
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		for _, text := range texts {
			for _, ref := range pathRefs(text) {
				if why := checkRef(root, filepath.Dir(p), top, ref, filepath.Ext(p) == ".go"); why != "" {
					bad = append(bad, fmt.Sprintf("%s: %q %s", rel, ref, why))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
	if len(bad) > 0 {
		t.Log("cite docs/architecture.md (or another file in the repository) instead, or spell the path as a URL if it is outside")
	}
}

// goComments returns the comments of a Go file.
func goComments(path string) ([]string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, g := range f.Comments {
		for _, c := range g.List {
			out = append(out, c.Text)
		}
	}
	return out, nil
}

var (
	urlRE = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s<>()"'` + "`" + `]*`)
	// A path-like word: no spaces, at least one "/" or a ".md" suffix.
	wordRE = regexp.MustCompile(`[A-Za-z0-9_.~*{},/@-]+`)
)

// pathRefs returns the path-like words of text, trailing punctuation
// trimmed.
func pathRefs(text string) []string {
	text = urlRE.ReplaceAllString(text, " ")
	var out []string
	for _, w := range wordRE.FindAllString(text, -1) {
		w = strings.TrimRight(w, ".,:;")
		if i := strings.Index(w, "#"); i >= 0 {
			w = w[:i]
		}
		if strings.Contains(w, "/") || strings.HasSuffix(w, ".md") {
			out = append(out, w)
		}
	}
	return out
}

// checkRef returns why ref, found in a file in dir (a comment of a Go
// file when inGo), is dangling, or "".
func checkRef(root, dir string, top map[string]bool, ref string, inGo bool) string {
	switch {
	case strings.HasPrefix(ref, "/"):
		if first, _, _ := strings.Cut(ref[1:], "/"); first == "work" {
			return "is a path on the machine the code was written on"
		}
		if sourceExt[filepath.Ext(ref)] {
			return "is a file outside the repository"
		}
		return ""
	case strings.HasPrefix(ref, "../"):
		if inGo && !citedExt[filepath.Ext(ref)] {
			return ""
		}
		p := filepath.Join(dir, ref)
		if r, err := filepath.Rel(root, p); err != nil || r == ".." || strings.HasPrefix(r, "../") {
			return "leads outside the repository"
		}
		if !exists(p) {
			return "does not exist"
		}
		return ""
	}
	ref = strings.TrimPrefix(ref, "./")
	// A Go name qualified by its package's path (internal/testenv.Program)
	// cites the package's directory.
	if m := goNameRE.FindStringSubmatch(ref); m != nil {
		ref = m[1]
	}
	// A component in capitals is a placeholder: sandbox/NAME is any
	// directory of sandbox.
	parts := strings.Split(ref, "/")
	for i, c := range parts {
		if i > 0 && placeholderRE.MatchString(c) {
			parts[i] = "*"
		}
	}
	ref = strings.Join(parts, "/")
	first, _, hasDir := strings.Cut(ref, "/")
	switch {
	case hasDir && top[first]:
	case !hasDir && projectDocRE.MatchString(ref) && !workspaceFiles[ref]:
	default:
		return ""
	}
	for d := dir; ; d = filepath.Dir(d) {
		if exists(filepath.Join(d, ref)) {
			return ""
		}
		if d == root || len(d) < len(root) {
			break
		}
	}
	return "does not exist in the repository"
}

// citedExt are the extensions of files a comment or document cites.
var citedExt = map[string]bool{".md": true, ".go": true, ".py": true, ".sh": true, ".json": true, ".jsonl": true, ".txt": true, ".txtar": true, ".cedar": true, ".yaml": true, ".yml": true, ".toml": true}

// goNameRE matches a package path followed by an exported Go name.
var goNameRE = regexp.MustCompile(`^(.*/[a-z0-9_]+)\.[A-Z][A-Za-z0-9_]*(\.[A-Z][A-Za-z0-9_]*)?$`)

// placeholderRE matches a placeholder component of a path: NAME, RUN_ID.
var placeholderRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]+$`)

// sourceExt are the extensions for which an absolute path is a file on
// somebody's disk rather than a URL path such as /v1/openapi.json.
var sourceExt = map[string]bool{".md": true, ".go": true, ".py": true, ".sh": true, ".txtar": true}

// projectDocRE matches a project document's name, such as README.md.
var projectDocRE = regexp.MustCompile(`^[A-Z][A-Z0-9_-]*\.md$`)

// workspaceFiles are memory files Keel reads from a user's workspace
// (agent/context.go), those of other agents, and the file every skill
// has (package skill), named in docs without being files of the
// repository.
var workspaceFiles = map[string]bool{"KEEL.md": true, "CLAUDE.md": true, "GEMINI.md": true, "SKILL.md": true}

// exists reports whether p, which may hold glob characters, "{a,b}"
// alternatives or a trailing "/...", names something on disk.
func exists(p string) bool {
	p = strings.TrimSuffix(strings.TrimSuffix(p, "/..."), "/")
	if i := strings.Index(p, "{"); i >= 0 {
		if j := strings.Index(p[i:], "}"); j > 0 {
			for _, alt := range strings.Split(p[i+1:i+j], ",") {
				if !exists(p[:i] + alt + p[i+j+1:]) {
					return false
				}
			}
			return true
		}
	}
	if strings.ContainsAny(p, "*?[") {
		m, _ := filepath.Glob(p)
		return len(m) > 0
	}
	_, err := os.Stat(p)
	return err == nil
}

// The reference checker flags what it should and nothing else.
func TestCheckRef(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{"agent": true, "docs": true, "tool": true, "internal": true}
	for _, tt := range []struct {
		dir, ref string
		inGo     bool
		bad      bool
	}{
		{"agent", "docs/architecture.md", true, false},
		{"agent", "agent/step.go", true, false},
		{"agent", "tool/builtin/{fs,shell}", true, false},
		{"agent", "tool/builtin/{fs,nosuch}", true, true},
		{"agent", "internal/cli/...", true, false},
		{"agent", "agent/nosuch.go", true, true},
		{"docs", "ROADMAP.md", false, true},
		{"docs", "GUIDE.md", true, true},
		{"docs", "AGENTS.md", false, false},
		{"docs", "KEEL.md", false, false},
		{"docs", "notes.md", false, false},
		{"docs", "../elsewhere/ROADMAP.md", false, true},
		{"docs", "../AGENTS.md", false, false},
		{"docs", "../../x", false, true},
		{"sandbox", "../..", true, false},
		{"sandbox", "../.gitconfig", true, false},
		{"tool", "/work/shared/bug-cases.md", true, true},
		{"tool", "/work/shared/eval", true, true},
		{"tool", "/home/ada/DESIGN.md", true, true},
		{"tool", "/v1/openapi.json", false, false},
		{"tool", "/workspace/src", true, false},
		{"tool", "/etc/passwd", true, false},
		{"tool", "allow/deny", true, false},
		{"tool", "internal/testenv.Program", true, false},
		{"tool", "internal/nosuch.Program", true, true},
		{"tool", "tool/builtin/fs/read_file.md", true, false},
		{"tool", "tool/builtin/NAME", false, false},
		{"tool", "tool/NOSUCH/x.go", false, true},
	} {
		why := checkRef(root, filepath.Join(root, tt.dir), top, tt.ref, tt.inGo)
		if (why != "") != tt.bad {
			t.Errorf("checkRef(%s, %q) = %q, want dangling %v", tt.dir, tt.ref, why, tt.bad)
		}
	}
	if got, want := pathRefs("see (docs/policy.md#rules), https://example.com/x/ROADMAP.md and GUIDE.md."), []string{"docs/policy.md", "GUIDE.md"}; !slices.Equal(got, want) {
		t.Errorf("pathRefs = %q, want %q", got, want)
	}
}
