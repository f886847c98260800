package fs_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/fs"
)

// testEnv is a workspace with the file tools registered.
type testEnv struct {
	t   *testing.T
	dir string
	reg *tool.Registry
	env *tool.Env
}

func newEnv(t *testing.T) *testEnv {
	t.Helper()
	return newEnvAt(t, t.TempDir(), nil)
}

func newEnvAt(t *testing.T, dir string, opts *fs.Options) *testEnv {
	t.Helper()
	ws, err := tool.NewWorkspace(dir, "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	reg := tool.NewRegistry()
	fs.Register(reg, opts)
	return &testEnv{t: t, dir: ws.Root(), reg: reg, env: &tool.Env{Workspace: ws}}
}

// call validates and runs a tool call as the runtime would.
func (e *testEnv) call(name string, args any) *tool.Result {
	e.t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		e.t.Fatal(err)
	}
	valid, bad := e.reg.Validate(model.ToolCall{ID: "c1", Name: name, Arguments: string(raw)})
	if bad != nil {
		return bad
	}
	res, err := e.reg.Run(e.t.Context(), name, &tool.Request{RunID: "r", CallID: "c1", Arguments: valid, Env: e.env})
	if err != nil {
		e.t.Fatalf("%s(%s): runtime error %v", name, raw, err)
	}
	if !json.Valid(mustJSON(e.t, res)) || strings.ContainsRune(res.Content, 0) {
		e.t.Errorf("%s(%s): result is not clean JSON", name, raw)
	}
	return res
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *testEnv) write(rel, content string) {
	e.t.Helper()
	p := filepath.Join(e.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *testEnv) read(rel string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, rel))
	if err != nil {
		e.t.Fatalf("read %s: %v", rel, err)
	}
	return string(b)
}

func wantOK(t *testing.T, r *tool.Result, contains ...string) {
	t.Helper()
	if r.IsError {
		t.Errorf("unexpected error result: %q", r.Content)
		return
	}
	for _, s := range contains {
		if !strings.Contains(r.Content, s) {
			t.Errorf("result lacks %q:\n%s", s, r.Content)
		}
	}
}

func wantErr(t *testing.T, r *tool.Result, contains ...string) {
	t.Helper()
	if !r.IsError {
		t.Errorf("want an error result, got %q", r.Content)
		return
	}
	for _, s := range contains {
		if !strings.Contains(r.Content, s) {
			t.Errorf("error lacks %q: %q", s, r.Content)
		}
	}
}

// TestPathEscapeSymlink is PATH-ESCAPE/symlink: every call is denied,
// nothing outside changes, and links that stay inside still work.
func TestPathEscapeSymlink(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	ws := filepath.Join(top, "WS")
	out := filepath.Join(top, "OUT")
	os.MkdirAll(ws, 0o755)
	os.MkdirAll(out, 0o755)
	os.WriteFile(filepath.Join(out, "victim.txt"), []byte("original\n"), 0o644)
	os.Mkdir(filepath.Join(ws, "real"), 0o755)
	os.WriteFile(filepath.Join(ws, "real", "in.txt"), []byte("inside\n"), 0o644)
	for link, target := range map[string]string{
		"outbox": "../OUT", "notes.md": "../OUT/victim.txt", "draft.txt": "../OUT/new.txt",
		"inbox": "real", "alias.txt": "real/in.txt", "pending.txt": "real/pending.txt",
	} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	e := newEnvAt(t, ws, nil)
	for _, c := range []struct {
		name string
		args map[string]any
	}{
		{fs.WriteName, map[string]any{"path": "outbox/escaped.txt", "content": "X"}},
		{fs.WriteName, map[string]any{"path": "notes.md", "content": "X"}},
		{fs.WriteName, map[string]any{"path": "draft.txt", "content": "X"}},
		{fs.ReadName, map[string]any{"path": "outbox/../OUT/victim.txt"}},
		{fs.ReadName, map[string]any{"path": "notes.md"}},
		{fs.EditName, map[string]any{"path": "notes.md", "old_string": "original", "new_string": "X"}},
		{fs.ListName, map[string]any{"path": "outbox"}},
		{fs.SearchName, map[string]any{"pattern": "original", "path": "outbox"}},
		{fs.WriteName, map[string]any{"path": "../OUT/victim.txt", "content": "X"}},
		{fs.WriteName, map[string]any{"path": filepath.Join(out, "victim.txt"), "content": "X"}},
	} {
		r := e.call(c.name, c.args)
		wantErr(t, r, "outside the workspace")
	}
	if got, _ := os.ReadFile(filepath.Join(out, "victim.txt")); string(got) != "original\n" {
		t.Errorf("victim.txt = %q, want it unchanged", got)
	}
	for _, f := range []string{"escaped.txt", "new.txt"} {
		if _, err := os.Lstat(filepath.Join(out, f)); !os.IsNotExist(err) {
			t.Errorf("OUT/%s exists: %v", f, err)
		}
	}
	// Links that stay inside work, and stay links.
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": "inbox/new.txt", "content": "a\n"}))
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": "alias.txt", "content": "changed\n"}), "written to real/in.txt")
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": "pending.txt", "content": "p\n"}))
	wantOK(t, e.call(fs.ReadName, map[string]any{"path": "alias.txt"}), "changed")
	if e.read("real/new.txt") != "a\n" || e.read("real/in.txt") != "changed\n" || e.read("real/pending.txt") != "p\n" {
		t.Errorf("writes through inside links went astray")
	}
	if fi, err := os.Lstat(filepath.Join(ws, "alias.txt")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("alias.txt is no longer a link: %v %v", fi, err)
	}
}

func TestProtectedPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write(".git/config", "[core]\n")
	for _, p := range []string{".git/hooks/pre-commit", ".git/config", ".keel/state", ".keel"} {
		wantErr(t, e.call(fs.WriteName, map[string]any{"path": p, "content": "x"}), "protected")
	}
	wantErr(t, e.call(fs.EditName, map[string]any{"path": ".git/config", "old_string": "core", "new_string": "x"}), "protected")
	if e.read(".git/config") != "[core]\n" {
		t.Errorf(".git/config changed")
	}
	// Reading a protected path is allowed.
	wantOK(t, e.call(fs.ReadName, map[string]any{"path": ".git/config"}), "[core]")
}

// TestGitMetadataReadOnly is the git-indirection fault: in a worktree or
// submodule checkout .git is a file ("gitdir: ..."), and rewriting it (or
// any other file git follows: commondir, config.worktree, a submodule's
// or a nested repository's config and hooks) would make the host's git
// read a config the agent wrote. File tools refuse every path with a
// .git component, through links too, and leave the files as they were.
func TestGitMetadataReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write(".git", "gitdir: ../main/.git/worktrees/w\n")
	e.write("vendor/lib/.git/config", "[core]\n")
	if err := os.Symlink("vendor/lib/.git", filepath.Join(e.dir, "meta")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".git", "./.git", ".GIT", "vendor/lib/.git/config", "vendor/lib/.git/commondir",
		"vendor/lib/.git/hooks/pre-commit", "vendor/lib/.git/config.worktree", "meta/config", "x/.git/modules/m/config", "new/.git"} {
		wantErr(t, e.call(fs.WriteName, map[string]any{"path": p, "content": "gitdir: ./evil/g\n"}), "protected")
	}
	wantErr(t, e.call(fs.EditName, map[string]any{"path": ".git", "old_string": "../main", "new_string": "./evil"}), "protected")
	wantErr(t, e.call(fs.EditName, map[string]any{"path": "meta/config", "old_string": "[core]", "new_string": "[core]\n\tfsmonitor = x"}), "protected")
	if got := e.read(".git"); got != "gitdir: ../main/.git/worktrees/w\n" {
		t.Errorf(".git = %q, changed", got)
	}
	if got := e.read("vendor/lib/.git/config"); got != "[core]\n" {
		t.Errorf("vendor/lib/.git/config = %q, changed", got)
	}
	for _, p := range []string{"x", "new", "vendor/lib/.git/commondir"} {
		if _, err := os.Lstat(filepath.Join(e.dir, p)); err == nil {
			t.Errorf("%s was created", p)
		}
	}
	// Files whose names merely start with .git are the agent's.
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": ".gitignore", "content": "*.o\n"}))
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": ".github/workflows/ci.yml", "content": "on: push\n"}))
}

// TestUnicodeNames checks that names are used literally: NFC and NFD
// spellings are different files, spaces are kept.
func TestUnicodeNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nfc, nfd := "caf\u00e9 notes.txt", "cafe\u0301 notes.txt"
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": nfc, "content": "composed\n"}))
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": nfd, "content": "decomposed\n"}))
	if e.read(nfc) != "composed\n" || e.read(nfd) != "decomposed\n" {
		t.Errorf("NFC and NFD names were conflated")
	}
	wantOK(t, e.call(fs.ReadName, map[string]any{"path": nfd}), "decomposed")
	entries, _ := os.ReadDir(e.dir)
	if len(entries) != 2 {
		t.Errorf("want 2 files, got %d", len(entries))
	}
}

func TestScopes(t *testing.T) {
	t.Parallel()
	reg := tool.NewRegistry()
	fs.Register(reg, nil)
	for _, tt := range []struct {
		name   string
		args   string
		want   []string
		effect tool.Effect
	}{
		{fs.ReadName, `{"path":"a.txt"}`, []string{"a.txt"}, tool.ReadOnly},
		{fs.WriteName, `{"path":"b/c.txt","content":""}`, []string{"b/c.txt"}, tool.WorkspaceWrite},
		{fs.EditName, `{"path":"d","old_string":"x","new_string":"y"}`, []string{"d"}, tool.WorkspaceWrite},
		{fs.ListName, `{}`, []string{"."}, tool.ReadOnly},
		{fs.SearchName, `{"pattern":"x","path":"src"}`, []string{"src"}, tool.ReadOnly},
	} {
		tl := reg.Tool(tt.name)
		if diff := cmp.Diff(tt.want, tl.Scope(json.RawMessage(tt.args))); diff != "" || tl.Effect != tt.effect || tl.Idempotent {
			t.Errorf("%s: scope diff %s, effect %v idempotent %v", tt.name, diff, tl.Effect, tl.Idempotent)
		}
	}
	if diff := cmp.Diff([]string{fs.EditName, fs.ReadName, fs.SearchName, fs.WriteName}, reg.Names()); diff != "" {
		t.Errorf("names: %s", diff)
	}
	// list_directory, retired, still runs for the runs that were offered
	// it, and is offered to no new run.
	if tl := reg.Tool(fs.ListName); tl == nil || !tl.Unlisted {
		t.Errorf("list_directory: %+v, want registered and unlisted", tl)
	}
}

func TestNoWorkspace(t *testing.T) {
	t.Parallel()
	reg := tool.NewRegistry()
	fs.Register(reg, nil)
	res, err := reg.Run(t.Context(), fs.ReadName, &tool.Request{Arguments: json.RawMessage(`{"path":"a"}`), Env: &tool.Env{}})
	if err != nil || !res.IsError {
		t.Errorf("read_file without a workspace = %v, %v; want an error result", res, err)
	}
}
