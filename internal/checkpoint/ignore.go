package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// InfoExclude returns the content of the .git/info/exclude file of the
// repository at dir ("" when it has none), for a [Base]: a run can write
// that file, so the rules at its start are recorded.
func InfoExclude(ctx context.Context, dir string) (string, error) {
	out, err := git(ctx, dir, nil, "rev-parse", "--path-format=absolute", "--git-path", "info/exclude")
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(strings.TrimSpace(string(out)))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return string(b), err
}

// ignoredPaths are the paths of a work tree that git ignores now and
// that the rules of a base ignored too: files, and directories ignored
// as a whole (with a trailing slash).
type ignoredPaths struct{ files, dirs []string }

// hiddenFiles lists the files of the work tree at dir that git ignores
// now but that the rules of the base do not ignore: the .gitignore
// files of its commit (files, from ls-tree), exclude (nil: the
// repository's .git/info/exclude now) and the user's core.excludesFile.
// The base's rules are read by git in a scratch repository holding only
// them, so nothing written in the work tree since counts. still are the
// paths both ignore.
func hiddenFiles(ctx context.Context, dir string, files map[string]entry, exclude *string) (hidden []string, still ignoredPaths, err error) {
	out, err := git(ctx, dir, nil, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
	if err != nil {
		return nil, still, err
	}
	now := nul(out)
	if len(now) == 0 {
		return nil, still, nil
	}
	rules, err := os.MkdirTemp("", "keel-ignore-")
	if err != nil {
		return nil, still, err
	}
	defer os.RemoveAll(rules)
	if _, err := git(ctx, rules, nil, "init", "-q", "--template="); err != nil {
		return nil, still, err
	}
	for p, e := range files {
		if e.repo != "" || path.Base(p) != ".gitignore" || !strings.HasPrefix(e.mode, "100") || !filepath.IsLocal(p) {
			continue
		}
		b, err := git(ctx, dir, nil, "cat-file", "blob", e.sha)
		if err != nil {
			return nil, still, err
		}
		if err := writeRule(filepath.Join(rules, filepath.FromSlash(p)), b); err != nil {
			return nil, still, err
		}
	}
	if exclude == nil {
		cur, err := InfoExclude(ctx, dir)
		if err != nil {
			return nil, still, err
		}
		exclude = &cur
	}
	if err := writeRule(filepath.Join(rules, ".git", "info", "exclude"), []byte(*exclude)); err != nil {
		return nil, still, err
	}
	var opts []string
	if f, err := git(ctx, dir, nil, "config", "--path", "--get", "core.excludesFile"); err == nil && len(strings.TrimSpace(string(f))) > 0 {
		opts = []string{"-c", "core.excludesFile=" + strings.TrimSpace(string(f))}
	}
	ignored := func(paths []string) (map[string]bool, error) {
		out, err := git(ctx, rules, nulJoin(paths), append(opts, "check-ignore", "--no-index", "-z", "--stdin")...)
		if err != nil && !exited(err, 1) { // 1: none ignored
			return nil, err
		}
		m := map[string]bool{}
		for _, p := range nul(out) {
			m[p] = true
		}
		return m, nil
	}
	was, err := ignored(now)
	if err != nil {
		return nil, still, err
	}
	// git lists a directory it does not ignore as a whole and also each
	// of its files that a pattern ignores (`*.py[cod]` in __pycache__/):
	// each file once.
	seen := map[string]bool{}
	file := func(p string, isHidden bool) {
		if seen[p] {
			return
		}
		seen[p] = true
		if isHidden {
			hidden = append(hidden, p)
		} else {
			still.files = append(still.files, p)
		}
	}
	for _, p := range now {
		if was[p] {
			if strings.HasSuffix(p, "/") {
				still.dirs = append(still.dirs, p)
			} else {
				file(p, false)
			}
			continue
		}
		if !strings.HasSuffix(p, "/") {
			file(p, true)
			continue
		}
		// A directory git ignores as a whole now: its files, as the
		// base's rules see each.
		var inside []string
		err := filepath.WalkDir(filepath.Join(dir, filepath.FromSlash(p)), func(name string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == ".git" {
					return filepath.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0 {
				rel, err := filepath.Rel(dir, name)
				if err != nil {
					return err
				}
				inside = append(inside, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return nil, still, err
		}
		if len(inside) == 0 {
			continue
		}
		m, err := ignored(inside)
		if err != nil {
			return nil, still, err
		}
		for _, f := range inside {
			file(f, !m[f])
		}
	}
	return hidden, still, nil
}

func writeRule(name string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return err
	}
	return os.WriteFile(name, b, 0o600)
}

// nulJoin is paths as git's -z --stdin reads them.
func nulJoin(paths []string) []byte {
	var in bytes.Buffer
	for _, p := range paths {
		in.WriteString(p)
		in.WriteByte(0)
	}
	return in.Bytes()
}

// exited reports whether err is git's exit with status code (for
// check-ignore, 1: nothing ignored; for add --ignore-errors, 1: some
// files could not be read).
func exited(err error, code int) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == code
}

// nul splits git's -z output.
func nul(out []byte) []string {
	var s []string
	for _, p := range strings.Split(string(out), "\x00") {
		if p != "" {
			s = append(s, p)
		}
	}
	return s
}
