package mcp

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/keel-run/keel/tool"
)

// What a stdio server runs from the workspace, for each way of starting
// one: a change to any of it changes the digest, a change elsewhere does
// not.
func TestServerRootsCoverWhatRuns(t *testing.T) {
	files := map[string]string{
		"srv/index.js":                             "require('./lib')",
		"srv/lib.js":                               "module.exports = 1",
		"srv/package.json":                         "{}",
		"package.json":                             "{}",
		"node_modules/dep/index.js":                "module.exports = 2",
		"node_modules/dep/package.json":            "{}",
		"node_modules/.bin/tool":                   "#!/usr/bin/env node",
		"py/server.py":                             "import helper",
		"py/helper.py":                             "X = 1",
		"py/pkg/__pycache__/m.cpython.pyc":         "\x00",
		".venv/pyvenv.cfg":                         "home = /usr/bin",
		".venv/lib/python3/site-packages/evil.pth": "import os",
		"README.md":                                "docs",
		"pyproject.toml":                           "[project]",
		"uv.lock":                                  "version = 1",
		"deps.zip":                                 "PK",
		"lib/pkgmod/__main__.py":                   "import helper",
		"shared/util/index.js":                     "module.exports = 3",
		"shared/util/package.json":                 "{}",
		"data/notes.txt":                           "not code",
	}
	for _, c := range []struct {
		name    string
		argv    []string
		env     []string // the server's own
		changes []string // each changes the digest
		same    []string // none does
	}{
		{"node script", []string{"node", "/workspace/srv/index.js"}, nil, []string{"srv/index.js", "srv/lib.js", "srv/package.json", "package.json", "node_modules/dep/index.js"}, []string{"README.md", "py/helper.py"}},
		{"python script", []string{"python3", "py/server.py", "--root", "/workspace/data"}, nil, []string{"py/server.py", "py/helper.py", "py/pkg/__pycache__/m.cpython.pyc"}, []string{"README.md", "data/notes.txt", "srv/lib.js"}},
		{"virtual environment", []string{".venv/bin/python", "-m", "mcp_srv"}, nil, []string{".venv/lib/python3/site-packages/evil.pth", "py/helper.py"}, []string{"README.md", "srv/lib.js"}},
		{"npx", []string{"npx", "-y", "dep"}, nil, []string{"node_modules/dep/index.js", "package.json"}, []string{"README.md", "py/helper.py"}},
		{"a package's bin", []string{"node_modules/.bin/tool"}, nil, []string{"node_modules/.bin/tool", "node_modules/dep/package.json"}, []string{"README.md"}},
		{"sh -c", []string{"sh", "-c", "python py/server.py --root /workspace/data"}, nil, []string{"py/server.py", "py/helper.py"}, []string{"README.md", "data/notes.txt", "srv/lib.js"}},
		{"bash -c", []string{"bash", "-lc", "exec node srv/index.js"}, nil, []string{"srv/index.js", "srv/lib.js", "srv/package.json", "package.json", "node_modules/dep/index.js"}, []string{"README.md", "py/helper.py"}},
		{"uv run", []string{"uv", "run", "py/server.py"}, nil, []string{"py/server.py", "py/helper.py", "pyproject.toml", "uv.lock", ".venv/lib/python3/site-packages/evil.pth"}, []string{"README.md", "srv/lib.js"}},
		{"python -m with PYTHONPATH", []string{"python3", "-m", "pkgmod"}, []string{"PYTHONPATH=/workspace/deps.zip:lib"}, []string{"deps.zip", "lib/pkgmod/__main__.py", "py/helper.py"}, []string{"README.md", "srv/lib.js"}},
		{"node with NODE_PATH", []string{"node", "srv/index.js"}, []string{"NODE_PATH=/workspace/shared"}, []string{"srv/index.js", "shared/util/index.js", "shared/util/package.json"}, []string{"README.md", "py/helper.py"}},
		{"outside the workspace", []string{"node", "/opt/mcp/index.js"}, nil, nil, []string{"srv/index.js", "README.md"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ws, err := tool.NewWorkspace(dir, "/workspace", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			roots := serverRoots(c.argv, c.env, ws)
			if len(c.changes) == 0 && len(roots) != 0 {
				t.Errorf("roots %v for a server outside the workspace", roots)
			}
			for _, f := range append(append([]string(nil), c.changes...), c.same...) {
				before := fingerprint(ws, roots)
				if err := os.WriteFile(filepath.Join(dir, f), []byte("changed by the run"), 0o644); err != nil {
					t.Fatal(err)
				}
				after := fingerprint(ws, roots)
				changed := before.Sum() != after.Sum()
				want := false
				for _, g := range c.changes {
					want = want || g == f
				}
				if changed != want {
					t.Errorf("%s changed: digest changed %v, want %v (roots %v)", f, changed, want, roots)
				}
				if want && len(changes(before, after)) == 0 {
					t.Errorf("%s changed: no change named", f)
				}
			}
		})
	}
}
