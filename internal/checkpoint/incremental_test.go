package checkpoint_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/internal/checkpoint"
)

// step is one change an agent's command could make to a workspace.
type step struct {
	name string
	do   func(t *testing.T, ws string, r *rand.Rand)
}

// pick returns a random existing regular file of ws outside .git (""
// when there is none).
func pick(t *testing.T, ws string, r *rand.Rand) string {
	t.Helper()
	var files []string
	filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".keel") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) == 0 {
		return ""
	}
	return files[r.IntN(len(files))]
}

func pickDir(t *testing.T, ws string, r *rand.Rand) string {
	t.Helper()
	dirs := []string{ws}
	filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == ".git" || d.Name() == ".keel" {
			return filepath.SkipDir
		}
		dirs = append(dirs, p)
		return nil
	})
	return dirs[r.IntN(len(dirs))]
}

var steps = []step{
	{"edit", func(t *testing.T, ws string, r *rand.Rand) {
		if f := pick(t, ws, r); f != "" {
			fh, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY, 0)
			if err == nil {
				fmt.Fprintf(fh, "edit %d\n", r.IntN(1000))
				fh.Close()
			}
		}
	}},
	{"rewrite same content", func(t *testing.T, ws string, r *rand.Rand) {
		if f := pick(t, ws, r); f != "" {
			b, _ := os.ReadFile(f)
			os.WriteFile(f, b, 0o644)
		}
	}},
	{"replace through a rename (sed -i)", func(t *testing.T, ws string, r *rand.Rand) {
		if f := pick(t, ws, r); f != "" {
			tmp := filepath.Join(filepath.Dir(f), fmt.Sprintf("sed%06d", r.IntN(1e6)))
			os.WriteFile(tmp, []byte("sed output\n"), 0o644)
			os.Rename(tmp, f)
		}
	}},
	{"chmod +x", func(t *testing.T, ws string, r *rand.Rand) {
		if f := pick(t, ws, r); f != "" {
			os.Chmod(f, 0o755)
		}
	}},
	{"chmod -x", func(t *testing.T, ws string, r *rand.Rand) {
		if f := pick(t, ws, r); f != "" {
			os.Chmod(f, 0o644)
		}
	}},
	{"delete", func(t *testing.T, ws string, r *rand.Rand) {
		if f := pick(t, ws, r); f != "" {
			os.Remove(f)
		}
	}},
	{"new file", func(t *testing.T, ws string, r *rand.Rand) {
		d := pickDir(t, ws, r)
		os.WriteFile(filepath.Join(d, fmt.Sprintf("new %d.txt", r.IntN(1000))), []byte("new\n"), 0o644)
	}},
	{"new ignored file", func(t *testing.T, ws string, r *rand.Rand) {
		d := pickDir(t, ws, r)
		os.WriteFile(filepath.Join(d, fmt.Sprintf("m%d.pyc", r.IntN(1000))), []byte("\x00pyc"), 0o644)
	}},
	{"file in an ignored directory", func(t *testing.T, ws string, r *rand.Rand) {
		os.MkdirAll(filepath.Join(ws, "build", "x"), 0o755)
		os.WriteFile(filepath.Join(ws, "build", "x", fmt.Sprintf("o%d", r.IntN(10))), []byte("obj"), 0o644)
	}},
	{"new directory", func(t *testing.T, ws string, r *rand.Rand) {
		d := filepath.Join(pickDir(t, ws, r), fmt.Sprintf("dir%d", r.IntN(100)), "deeper")
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "f.go"), []byte("package deeper\n"), 0o644)
	}},
	{"remove a directory", func(t *testing.T, ws string, r *rand.Rand) {
		if d := pickDir(t, ws, r); d != ws {
			os.RemoveAll(d)
		}
	}},
	{"rename a file", func(t *testing.T, ws string, r *rand.Rand) {
		if f := pick(t, ws, r); f != "" {
			os.Rename(f, filepath.Join(pickDir(t, ws, r), fmt.Sprintf("moved%d", r.IntN(100))))
		}
	}},
	{"rename a directory", func(t *testing.T, ws string, r *rand.Rand) {
		if d := pickDir(t, ws, r); d != ws {
			os.Rename(d, filepath.Join(ws, fmt.Sprintf("renamed%d", r.IntN(100))))
		}
	}},
	{"file to link", func(t *testing.T, ws string, r *rand.Rand) {
		if f := pick(t, ws, r); f != "" {
			os.Remove(f)
			os.Symlink("target/"+filepath.Base(f), f)
		}
	}},
	{"file to directory", func(t *testing.T, ws string, r *rand.Rand) {
		if f := pick(t, ws, r); f != "" {
			os.Remove(f)
			os.MkdirAll(f, 0o755)
			os.WriteFile(filepath.Join(f, "inside"), []byte("x"), 0o644)
		}
	}},
	{"empty a directory", func(t *testing.T, ws string, r *rand.Rand) {
		d := pickDir(t, ws, r)
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if !e.IsDir() {
				os.Remove(filepath.Join(d, e.Name()))
			}
		}
	}},
	{"a fifo", func(t *testing.T, ws string, r *rand.Rand) {
		syscall.Mkfifo(filepath.Join(pickDir(t, ws, r), fmt.Sprintf("fifo%d", r.IntN(10))), 0o644)
	}},
	{"a hard link", func(t *testing.T, ws string, r *rand.Rand) {
		if f := pick(t, ws, r); f != "" {
			os.Link(f, f+".hard")
		}
	}},
	{"edit .gitignore", func(t *testing.T, ws string, r *rand.Rand) {
		fh, err := os.OpenFile(filepath.Join(ws, ".gitignore"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err == nil {
			fmt.Fprintf(fh, "moved%d\n", r.IntN(100))
			fh.Close()
		}
	}},
	{"nothing", func(t *testing.T, ws string, r *rand.Rand) {}},
}

// TestIncrementalSnapshotIsGitAdd checks the incremental snapshots of a
// watched workspace against full ones (git add) of the same files in a
// second store, after each of more than a hundred random changes (several at a
// time), in a workspace that is a git repository with its own ignore
// rules and in one that is not: the same tree, the same changed files.
func TestIncrementalSnapshotIsGitAdd(t *testing.T) {
	needGit(t)
	for _, inRepo := range []bool{true, false} {
		t.Run(fmt.Sprintf("repository=%v", inRepo), func(t *testing.T) {
			ctx := t.Context()
			ws := t.TempDir()
			for i := range 40 {
				write(t, ws, fmt.Sprintf("d%d/e%d/f%d.go", i%4, i%3, i), fmt.Sprintf("package f%d\n", i))
			}
			write(t, ws, "top.txt", "top\n")
			write(t, ws, "odd name\twith tab", "odd\n")
			write(t, ws, ".gitignore", "*.pyc\nbuild/\n")
			if inRepo {
				run(t, ws, "init", "-q")
				write(t, ws, ".git/info/exclude", "*.log\n")
				write(t, ws, "kept.pyc", "tracked although ignored\n")
				run(t, ws, "add", "-A")
				run(t, ws, "add", "-f", "kept.pyc")
				run(t, ws, "commit", "-q", "-m", "base")
				write(t, ws, "x.log", "ignored by info/exclude\n")
			}
			inc, err := checkpoint.OpenCheckpoints(ctx, filepath.Join(t.TempDir(), "inc"), ws)
			if err != nil {
				t.Fatal(err)
			}
			defer inc.Watch()()
			full, err := checkpoint.OpenCheckpoints(ctx, filepath.Join(t.TempDir(), "full"), ws)
			if err != nil {
				t.Fatal(err)
			}
			prev, err := inc.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if base, err := full.Snapshot(ctx); err != nil || base != prev {
				t.Fatalf("first snapshots %s and %s (%v)", prev, base, err)
			}
			r := rand.New(rand.NewPCG(1, uint64(len(ws))))
			for i := range 120 {
				var did []string
				for range 1 + r.IntN(3) {
					s := steps[r.IntN(len(steps))]
					s.do(t, ws, r)
					did = append(did, s.name)
				}
				got, err := inc.Snapshot(ctx)
				if err != nil {
					t.Fatalf("step %d (%s): %v", i, strings.Join(did, ", "), err)
				}
				want, err := full.Snapshot(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("step %d (%s): incremental tree %s, git add's %s", i, strings.Join(did, ", "), got, want)
				}
				gotCh, err := inc.Changes(ctx, prev, got)
				if err != nil {
					t.Fatal(err)
				}
				if prev != got && !inc.Has(ctx, prev) {
					t.Fatalf("step %d: the store lacks the previous tree", i)
				}
				wantCh, err := full.Changes(ctx, prev, got)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(wantCh, gotCh); d != "" {
					t.Fatalf("step %d (%s): changes (-git +incremental):\n%s", i, strings.Join(did, ", "), d)
				}
				prev = got
			}
			f, n := checkpoint.Snapshots(inc)
			t.Logf("%d full and %d incremental snapshots", f, n)
			if n < 40 {
				t.Errorf("only %d of 121 snapshots were incremental", n)
			}
		})
	}
}

// TestIncrementalSharedStore snapshots two workspaces into one store at
// once (two runs of one process, as an eval's trials), each writing the
// same new file each round: both write its object at the same moment,
// and neither may leave the file out of its tree.
func TestIncrementalSharedStore(t *testing.T) {
	needGit(t)
	ctx := t.Context()
	store := filepath.Join(t.TempDir(), "store")
	type side struct {
		ws        string
		inc, full *checkpoint.Checkpoints
	}
	var sides [2]side
	for i := range sides {
		ws := t.TempDir()
		write(t, ws, "README", "hi\n")
		inc, err := checkpoint.OpenCheckpoints(ctx, store, ws)
		if err != nil {
			t.Fatal(err)
		}
		defer inc.Watch()()
		full, err := checkpoint.OpenCheckpoints(ctx, filepath.Join(t.TempDir(), "full"), ws)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inc.Snapshot(ctx); err != nil {
			t.Fatal(err)
		}
		sides[i] = side{ws, inc, full}
	}
	for round := range 200 {
		name := fmt.Sprintf("f%d.txt", round)
		for _, s := range sides {
			write(t, s.ws, name, fmt.Sprintf("same %d\n", round))
		}
		var got [2]string
		var errs [2]error
		done := make(chan int)
		for i, s := range sides {
			go func() {
				got[i], errs[i] = s.inc.Snapshot(ctx)
				done <- i
			}()
		}
		<-done
		<-done
		for i, s := range sides {
			if errs[i] != nil {
				t.Fatalf("round %d, workspace %d: %v", round, i, errs[i])
			}
			want, err := s.full.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got[i] != want {
				t.Fatalf("round %d, workspace %d: incremental tree %s, git add's %s", round, i, got[i], want)
			}
		}
	}
}

// TestOpenNewStoreAtOnce opens one new store from several runs at once
// (an eval's trials on a fresh KEEL_HOME): each must get the store, not
// an error from another's half-made one (a run whose open failed had no
// checkpoints at all).
func TestOpenNewStoreAtOnce(t *testing.T) {
	needGit(t)
	ctx := t.Context()
	for round := range 5 {
		store := filepath.Join(t.TempDir(), "checkpoints")
		const n = 6
		errs := make(chan error, n)
		for i := range n {
			ws := t.TempDir()
			write(t, ws, "f.txt", fmt.Sprintf("file %d\n", i))
			go func() {
				c, err := checkpoint.OpenCheckpoints(ctx, store, ws)
				if err == nil {
					_, err = c.Snapshot(ctx)
				}
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
