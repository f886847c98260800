package tool

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// linkFixture builds T/WS and T/OUT as in PATH-ESCAPE/symlink, plus links
// of every other shape, and returns the workspace and T.
func linkFixture(t *testing.T) (*Workspace, string) {
	t.Helper()
	top := t.TempDir()
	ws := filepath.Join(top, "WS")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(ws, "sub", "deep"), 0o755))
	must(os.MkdirAll(filepath.Join(top, "OUT"), 0o755))
	must(os.WriteFile(filepath.Join(top, "OUT", "victim.txt"), []byte("original\n"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "sub", "f.txt"), []byte("f\n"), 0o644))
	must(os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755))
	must(os.MkdirAll(filepath.Join(ws, "myhooks"), 0o755))
	for link, target := range map[string]string{
		"outbox":         "../OUT",            // directory link out
		"notes.md":       "../OUT/victim.txt", // final-component link out
		"draft.txt":      "../OUT/new.txt",    // dangling link out
		"abs-out":        filepath.Join(top, "OUT"),
		"abs-etc":        "/etc/passwd",
		"parent":         "..",
		"self":           ".",
		"inlink":         "sub",
		"inlink2":        "inlink/deep",
		"newlink":        "sub/new.txt", // dangling, inside
		"mountlink":      "/workspace/sub",
		"mountlink-out":  "/workspace/../etc",
		"hostlink":       filepath.Join(ws, "sub"),
		"roundtrip":      "../WS/sub", // leaves and comes back in
		"gitlink":        ".git",      // a link to git's metadata
		"loop1":          "loop2",
		"loop2":          "loop1",
		"mloop1":         "/workspace/mloop2",
		"mloop2":         "/workspace/mloop1",
		"sub/up":         "../..", // sub/up = T
		"sub/deep/up2":   "../../inlink",
		"sub/f.txt.link": "f.txt",
	} {
		must(os.Symlink(target, filepath.Join(ws, link)))
	}
	w, err := NewWorkspace(ws, "/workspace", []string{"secrets"})
	must(err)
	t.Cleanup(func() { w.Close() })
	return w, top
}

func TestWorkspaceResolve(t *testing.T) {
	t.Parallel()
	w, _ := linkFixture(t)
	for _, tt := range []struct {
		path    string
		want    string
		outside bool
		fail    bool // another error
	}{
		// PATH-ESCAPE/symlink, the four repro calls.
		{path: "outbox/escaped.txt", outside: true},
		{path: "notes.md", outside: true},
		{path: "draft.txt", outside: true},
		{path: "outbox/../OUT/victim.txt", outside: true},
		// Every other shape of escape.
		{path: "outbox", outside: true},
		{path: "abs-out/victim.txt", outside: true},
		{path: "abs-etc", outside: true},
		{path: "parent/OUT/victim.txt", outside: true},
		{path: "parent", outside: true},
		{path: "mountlink-out", outside: true},
		{path: "sub/up/OUT", outside: true},
		{path: "../OUT/victim.txt", outside: true},
		{path: "sub/../../OUT", outside: true},
		{path: "/etc/passwd", outside: true},
		{path: "/workspace/../etc/passwd", outside: true},
		{path: "/workspacefoo/x", outside: true},
		// Links that stay inside keep working.
		{path: "inlink/f.txt", want: "sub/f.txt"},
		{path: "inlink2", want: "sub/deep"},
		{path: "inlink2/new.txt", want: "sub/deep/new.txt"},
		{path: "newlink", want: "sub/new.txt"},
		{path: "mountlink/f.txt", want: "sub/f.txt"},
		{path: "hostlink/f.txt", want: "sub/f.txt"},
		{path: "roundtrip/f.txt", want: "sub/f.txt"},
		{path: "self/sub/./f.txt", want: "sub/f.txt"},
		{path: "sub/deep/up2/f.txt", want: "sub/f.txt"},
		{path: "sub/f.txt.link", want: "sub/f.txt"},
		{path: "inlink/../sub/f.txt", want: "sub/f.txt"},
		{path: "sub/deep/../f.txt", want: "sub/f.txt"},
		// Plain paths, absolute forms and literal names.
		{path: ".", want: "."},
		{path: "/workspace", want: "."},
		{path: "/workspace/sub//f.txt", want: "sub/f.txt"},
		{path: "new dir/ünïcode file.txt", want: "new dir/ünïcode file.txt"},
		{path: "caf\u00e9", want: "caf\u00e9"},   // NFC
		{path: "cafe\u0301", want: "cafe\u0301"}, // NFD: a different name
		// Errors that are not escapes.
		{path: "loop1", fail: true},
		{path: "mloop1/x", fail: true},
		{path: "sub/f.txt/x", fail: true},
		{path: "nosuch/../x", fail: true},
		{path: "", fail: true},
		{path: "a\x00b", fail: true},
	} {
		got, err := w.Resolve(tt.path)
		switch {
		case tt.outside:
			if !errors.Is(err, ErrOutside) {
				t.Errorf("Resolve(%q) = %q, %v; want ErrOutside", tt.path, got, err)
			}
		case tt.fail:
			if err == nil || errors.Is(err, ErrOutside) {
				t.Errorf("Resolve(%q) = %q, %v; want a non-escape error", tt.path, got, err)
			}
		case err != nil || got != tt.want:
			t.Errorf("Resolve(%q) = %q, %v; want %q", tt.path, got, err, tt.want)
		}
	}
}

func TestWorkspaceHostRootPath(t *testing.T) {
	t.Parallel()
	w, _ := linkFixture(t)
	got, err := w.Resolve(filepath.Join(w.Root(), "inlink", "f.txt"))
	if err != nil || got != "sub/f.txt" {
		t.Errorf("Resolve(host path) = %q, %v; want sub/f.txt", got, err)
	}
}

func TestWorkspaceResolveWrite(t *testing.T) {
	t.Parallel()
	w, _ := linkFixture(t)
	// .git/hooks is linked elsewhere: its real location is protected too.
	os.RemoveAll(filepath.Join(w.Root(), ".git", "hooks"))
	os.Symlink("../myhooks", filepath.Join(w.Root(), ".git", "hooks"))
	for _, tt := range []struct {
		path      string
		want      string
		protected bool
		fail      bool
	}{
		{path: ".git/hooks/pre-commit", protected: true},
		{path: "myhooks/pre-commit", protected: true},
		{path: ".git/config", protected: true},
		{path: ".keel/artifacts/x", protected: true},
		{path: ".keel", protected: true},
		{path: "secrets/key", protected: true},
		{path: "./.git/../.keel/x", protected: true},
		{path: ".git/HEAD", protected: true},
		{path: ".git", protected: true},
		{path: ".git/commondir", protected: true},
		{path: ".git/config.worktree", protected: true},
		{path: ".git/modules/m/config", protected: true},
		{path: ".git/worktrees/w/commondir", protected: true},
		{path: "vendor/lib/.git/config", protected: true},
		{path: "vendor/lib/.GIT/hooks/pre-commit", protected: true},
		{path: "gitlink/x", protected: true},
		{path: ".gitignore", want: ".gitignore"},
		{path: "sub/.github/workflows/ci.yml", want: "sub/.github/workflows/ci.yml"},
		{path: ".keelrc", want: ".keelrc"},
		{path: "sub/new.txt", want: "sub/new.txt"},
		{path: ".", fail: true},
		{path: "outbox/escaped.txt", fail: true},
	} {
		got, err := w.ResolveWrite(tt.path)
		switch {
		case tt.protected:
			if !errors.Is(err, ErrProtected) {
				t.Errorf("ResolveWrite(%q) = %q, %v; want ErrProtected", tt.path, got, err)
			}
			// Hooks and configuration are read-only in the sandbox too:
			// the refusal does not send the model to bash (fresh-user
			// trial 6).
			if hostOnly := strings.Contains(strings.ToLower(tt.path), ".git/hooks/") || strings.HasSuffix(strings.ToLower(tt.path), ".git/config") || strings.HasSuffix(tt.path, ".git/config.worktree"); err != nil && hostOnly != strings.Contains(err.Error(), "a person changes them on the host") {
				t.Errorf("ResolveWrite(%q): %v; host-only hint %v", tt.path, err, hostOnly)
			}
		case tt.fail:
			if err == nil {
				t.Errorf("ResolveWrite(%q) = %q; want an error", tt.path, got)
			}
		case err != nil || got != tt.want:
			t.Errorf("ResolveWrite(%q) = %q, %v; want %q", tt.path, got, err, tt.want)
		}
	}
}

func TestWorkspaceRel(t *testing.T) {
	t.Parallel()
	w, err := NewWorkspace(t.TempDir(), "/work/space", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, tt := range []struct{ in, want string }{
		{"a/b", "a/b"},
		{"./a//b/", "a/b"},
		{"a/../b", "b"},
		{"/work/space/x y", "x y"},
		{"/work/space", "."},
		{"..", ""},
		{"a/../../b", ""},
		{"/work/spacex", ""},
	} {
		got, err := w.Rel(tt.in)
		if tt.want == "" {
			if !errors.Is(err, ErrOutside) {
				t.Errorf("Rel(%q) = %q, %v; want ErrOutside", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Rel(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if got := w.SandboxPath("a/b"); got != "/work/space/a/b" {
		t.Errorf("SandboxPath = %q", got)
	}
	if got := w.HostPath("a/b"); got != filepath.Join(w.Root(), "a", "b") {
		t.Errorf("HostPath = %q", got)
	}
}

func TestNewWorkspaceErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	for _, tt := range []struct{ dir, mount string }{
		{filepath.Join(dir, "missing"), ""},
		{file, ""},
		{dir, "relative/mount"},
	} {
		if w, err := NewWorkspace(tt.dir, tt.mount, nil); err == nil {
			w.Close()
			t.Errorf("NewWorkspace(%q, %q) succeeded, want an error", tt.dir, tt.mount)
		}
	}
	// A workspace reached through a link is opened at its real path.
	link := filepath.Join(dir, "link")
	os.Symlink(dir, link)
	w, err := NewWorkspace(link, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Root() != dir || w.MountPath() != "/workspace" {
		t.Errorf("Root, MountPath = %q, %q; want %q, /workspace", w.Root(), w.MountPath(), dir)
	}
}

// Hidden paths (the policy's [paths] deny) are refused by name, through
// links, and below them; their neighbours are not.
func TestWorkspaceHide(t *testing.T) {
	w, _ := linkFixture(t)
	w.Hide([]string{"sub/deep", "/etc/passwd", "..", "."})
	for _, tt := range []struct {
		path   string
		hidden bool
	}{
		{"sub/deep", true},
		{"sub/deep/x.txt", true},
		{"inlink/deep", true},  // through a link to sub
		{"inlink2", true},      // a link to it
		{"sub/deep/up2", true}, // below it, whatever it leads to
		{"sub/f.txt", false},
		{"sub/deeper", false},
		{"abs-etc", false}, // outside anyway: ErrOutside, not hidden
	} {
		_, err := w.Resolve(tt.path)
		if got := errors.Is(err, ErrHidden); got != tt.hidden {
			t.Errorf("Resolve(%q) = %v; hidden %v, want %v", tt.path, err, got, tt.hidden)
		}
	}
	if !w.Hidden("sub/deep") || w.Hidden("sub") || w.Hidden(".") {
		t.Errorf("Hidden: %v %v %v", w.Hidden("sub/deep"), w.Hidden("sub"), w.Hidden("."))
	}
}

// A hidden path is known by its identity too: renaming its parent, or
// itself, or making a hard link to it does not open it to the file
// tools, for reads, writes and walks; what was beside it stays open.
func TestWorkspaceHideByIdentity(t *testing.T) {
	root := t.TempDir()
	for rel, content := range map[string]string{"config/prod.env": "CANARY\n", "config/app.env": "ok\n", "vault/k": "CANARY\n"} {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := NewWorkspace(root, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Hide([]string{"config/prod.env", "vault"})
	for _, step := range [][2]string{{"config", "cfg2"}, {"vault", "v2"}} {
		if err := os.Rename(filepath.Join(root, step[0]), filepath.Join(root, step[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(root, "cfg2/prod.env"), filepath.Join(root, "hard.env")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path   string
		hidden bool
	}{
		{"cfg2/prod.env", true},
		{"/workspace/cfg2/../cfg2/prod.env", true},
		{"hard.env", true},
		{"v2", true},
		{"v2/k", true},
		{"v2/new.txt", true},
		{"cfg2/app.env", false},
		{"cfg2", false},
		{"cfg2/new.txt", false},
	} {
		_, err := w.Resolve(tt.path)
		if got := errors.Is(err, ErrHidden); got != tt.hidden {
			t.Errorf("Resolve(%q) = %v; hidden %v, want %v", tt.path, err, got, tt.hidden)
		}
		_, err = w.ResolveWrite(tt.path)
		if got := errors.Is(err, ErrHidden); got != tt.hidden {
			t.Errorf("ResolveWrite(%q) = %v; hidden %v, want %v", tt.path, err, got, tt.hidden)
		}
	}
	if !w.Hidden("hard.env") || !w.Hidden("v2/k") || w.Hidden("cfg2/app.env") {
		t.Errorf("Hidden: %v %v %v", w.Hidden("hard.env"), w.Hidden("v2/k"), w.Hidden("cfg2/app.env"))
	}
}

// A lexical workspace (keel policy check without a directory) refuses
// and resolves a call's paths in the words of a workspace with a
// directory that holds no link (and has the directories named), for
// reads and writes alike
// (ResolveCall, the gate's).
func TestLexicalWorkspaceResolvesAsADirectory(t *testing.T) {
	dir := t.TempDir()
	// A ".." after a directory that does not exist fails in a directory
	// (no such file); a lexical workspace takes every directory to exist.
	if err := os.Mkdir(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	real, err := NewWorkspace(dir, "/src", []string{"policy.toml"})
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	lex, err := NewLexicalWorkspace("/src", []string{"policy.toml"})
	if err != nil {
		t.Fatal(err)
	}
	defer lex.Close()
	real.Hide([]string{"secrets"})
	lex.Hide([]string{"secrets"})
	for _, tt := range []struct {
		path   string
		effect Effect
		want   string // the resolved path, or the error
	}{
		{"a/b.go", WorkspaceWrite, "a/b.go"},
		{"/src/a/../b.go", ReadOnly, "b.go"},
		{"/src", ReadOnly, "."},
		{"/etc/passwd", ReadOnly, "/etc/passwd: path is outside the workspace (the workspace is /src)"},
		{"/workspace/x", ReadOnly, "/workspace/x: path is outside the workspace (the workspace is /src)"},
		{"/src/../etc/passwd", ReadOnly, "/src/../etc/passwd: path is outside the workspace"},
		{"a/../../b", WorkspaceWrite, "a/../../b: path is outside the workspace"},
		{".git/hooks/pre-commit", WorkspaceWrite, ".git/hooks/pre-commit: path is protected (git's hooks and configuration are read-only for the agent, for file tools and in the sandbox alike; a person changes them on the host)"},
		{"sub/.GIT/objects/x", WorkspaceWrite, "sub/.GIT/objects/x: path is protected (git's metadata is read-only for file tools; change the repository with git through the bash tool)"},
		{".git/config", ReadOnly, ".git/config"},
		{".keel/config.toml", WorkspaceWrite, ".keel/config.toml: path is protected (read-only for the agent)"},
		{"policy.toml", WorkspaceWrite, "policy.toml: path is protected (read-only for the agent)"},
		{"secrets/key", ReadOnly, "secrets/key: path is forbidden by the run's policy"},
		{".", WorkspaceWrite, ".: is the workspace root, not a file"},
		{"", ReadOnly, "empty path"},
	} {
		for _, ws := range []*Workspace{real, lex} {
			got, err := ws.ResolveCall(tt.effect, []string{"ok", tt.path})
			s := strings.Join(got, ",")
			if err != nil {
				s = err.Error()
			} else {
				s = strings.TrimPrefix(s, "ok,")
			}
			if s != tt.want {
				t.Errorf("lexical %v: ResolveCall(%s, %q) = %q, want %q", ws.lexical, tt.effect, tt.path, s, tt.want)
			}
		}
	}
}
