package realpath_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/keel-run/keel/internal/realpath"
)

func TestResolve(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ln := func(target, name string) {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	mk("ws/sub")
	mk("outside/deep")
	ln(filepath.Join(root, "outside"), "ws/out")   // a link out of the workspace
	ln("outside/deep", "rel")                      // a relative link
	ln(filepath.Join(root, "nowhere/db"), "ws/db") // dangling, to a directory that does not exist
	ln("../outside/new.db", "ws/new.db")           // dangling, to a file that does not exist yet
	for _, c := range []struct{ in, want string }{
		{"ws/sub", "ws/sub"},
		{"ws/sub/not/yet", "ws/sub/not/yet"},
		{"ws/out/deep/x", "outside/deep/x"},
		{"ws/out/../sub", "sub"}, // the link target's parent, as the kernel reads it
		{"rel/file", "outside/deep/file"},
		{"ws/db", "nowhere/db"},
		{"ws/db-wal", "ws/db-wal"},
		{"ws/new.db", "outside/new.db"},
	} {
		if got := realpath.Resolve(root + "/" + c.in); got != filepath.Join(root, c.want) {
			t.Errorf("Resolve(%s) = %s, want %s", c.in, got, filepath.Join(root, c.want))
		}
	}
	t.Chdir(filepath.Join(root, "ws"))
	if got := realpath.Resolve("out/deep"); got != filepath.Join(root, "outside/deep") {
		t.Errorf("a relative path: %s", got)
	}
	if got := realpath.Resolve("/no/such/../path"); got != "/no/path" {
		t.Errorf("nothing exists: %s", got)
	}
}

func TestWithinAndRel(t *testing.T) {
	for _, c := range []struct {
		p, dir, rel string
		ok          bool
	}{
		{"/a/b", "/a", "b", true},
		{"/a", "/a", ".", true},
		{"/ab", "/a", "", false},
		{"/a", "/a/b", "", false},
		{"/x/y", "/", "x/y", true},
		{"/", "/", ".", true},
	} {
		rel, ok := realpath.Rel(c.dir, c.p)
		if rel != c.rel || ok != c.ok || realpath.Within(c.p, c.dir) != c.ok {
			t.Errorf("Rel(%s, %s) = %q, %v; want %q, %v", c.dir, c.p, rel, ok, c.rel, c.ok)
		}
	}
}
