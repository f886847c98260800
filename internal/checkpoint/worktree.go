// What a run changed in a git workspace: the commit a run started on
// (Start) and the workspace's files compared with that commit
// (DiffFrom), as unified diffs.

package checkpoint

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/keel-run/keel/policy"
)

// maxFile bounds a file whose diff is computed; larger ones are listed.
const maxFile = 8 << 20

// git runs git in dir with the repository's code-running settings off.
func git(ctx context.Context, dir string, stdin []byte, args ...string) ([]byte, error) {
	return runGit(ctx, "", append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "GIT_NO_REPLACE_OBJECTS=1"), stdin,
		[]string{"-C", dir, "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.untrackedCache=false"}, args...)
}

// runGit runs git with opts then args in dir ("": the current directory)
// with env, giving it stdin if not nil; an error names the subcommand
// (args[0]) and carries what git wrote to its standard error. Every git
// process of the package starts here.
func runGit(ctx context.Context, dir string, env []string, stdin []byte, opts []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", append(opts, args...)...)
	cmd.Dir, cmd.Env = dir, env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return out, nil
}

// ErrNotRepository is returned by Start for a directory that is not the
// top of a git work tree with a commit.
var ErrNotRepository = errors.New("checkpoint: not the top directory of a git repository with a commit")

// Start returns the HEAD commit of the repository at dir and the tracked
// files that differ from it (changed, staged or deleted).
func Start(ctx context.Context, dir string) (commit string, dirty []string, err error) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", nil, ErrNotRepository
	}
	top, err := git(ctx, dir, nil, "rev-parse", "--show-toplevel")
	if err != nil || !sameDir(strings.TrimSpace(string(top)), dir) {
		return "", nil, ErrNotRepository
	}
	head, err := git(ctx, dir, nil, "rev-parse", "--verify", "-q", "HEAD^{commit}")
	if err != nil {
		return "", nil, ErrNotRepository
	}
	commit = strings.TrimSpace(string(head))
	changes, err := DiffFrom(ctx, dir, Base{Commit: commit}, nil)
	if err != nil {
		return "", nil, err
	}
	for _, c := range changes {
		if c.Status != Added {
			dirty = append(dirty, c.Path)
		}
	}
	return commit, dirty, nil
}

// Origin returns where the repository at dir was cloned from (its
// remote "origin"), so that its commits can be found again once dir is
// gone: a URL without the user and password it may carry, or an absolute
// path. It returns "" when there is none.
func Origin(ctx context.Context, dir string) string {
	out, err := git(ctx, dir, nil, "config", "--get", "remote.origin.url")
	if err != nil {
		return ""
	}
	o := strings.TrimSpace(string(out))
	switch {
	case o == "":
		return ""
	case strings.Contains(o, "://"):
		u, err := url.Parse(o)
		if err != nil {
			return ""
		}
		u.User = nil
		return u.String()
	case filepath.IsAbs(o):
		return o
	case strings.Contains(o, ":") && !strings.Contains(o[:strings.Index(o, ":")], "/"):
		return o // scp-like [user@]host:path: ssh's user carries no secret
	default:
		return filepath.Join(dir, o) // git keeps a local path as given
	}
}

// Identity returns the author name and email that git on this machine
// gives a commit made in dir: from the repository's configuration, the
// user's (~/.gitconfig) or git's environment variables (GIT_AUTHOR_NAME,
// EMAIL, ...), with user.useConfigOnly, so that no address is guessed
// from the host's name. ok is false when git has no address configured
// (a commit would fail "Author identity unknown") or is not installed.
func Identity(ctx context.Context, dir string) (name, email string, ok bool) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", "", false
	}
	out, err := git(ctx, dir, nil, "-c", "user.useConfigOnly=true", "var", "GIT_AUTHOR_IDENT")
	if err != nil {
		return "", "", false
	}
	// "Name <email> 1765000000 +0000"
	line := strings.TrimSpace(string(out))
	lt, gt := strings.LastIndex(line, "<"), strings.LastIndex(line, ">")
	if lt < 0 || gt < lt {
		return "", "", false
	}
	name, email = strings.TrimSpace(line[:lt]), line[lt+1:gt]
	return name, email, name != "" && email != ""
}

func sameDir(a, b string) bool {
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}

// Status says how a file changed.
type Status string

// The statuses of a [Change].
const (
	Added    Status = "A"
	Modified Status = "M"
	Deleted  Status = "D"
	// TypeChanged is a file that became a symbolic link, or a link
	// that became a file (git's "T").
	TypeChanged Status = "T"
)

// Change is one changed file.
type Change struct {
	Path   string
	Status Status
	// Binary is set when either side is not text (or too large to
	// compare line by line); Patch is then empty.
	Binary bool
	// Patch is the unified diff (with ---/+++ headers, no "diff --git"
	// line); Added and Removed count its lines.
	Patch          string
	Added, Removed int
	// Denied is set when the run's policy denies the path ([paths]
	// deny): Patch is then empty, whatever the file holds.
	Denied bool
	// Hidden is set for a file git ignores only by rules that changed
	// since the start (a .gitignore file or .git/info/exclude written
	// later): git status does not show it, this diff does.
	Hidden bool
	// Rewritten is set when the start commit's copy of the file no
	// longer matches its hash (the object store of .git/ was rewritten
	// since): Patch then shows the whole file as added, for the
	// original is unknown.
	Rewritten bool
	// Ignored is set for a file git does not list that changed since the
	// run started (Base.Since): the start's ignore rules ignore it, or it
	// is in the repository's .git directory. Its earlier content is
	// unknown: Status is Added when it was created since (as far as the
	// file system tells), else Modified, and Patch shows its whole
	// content as added lines, only for a file that runs on its own
	// (Autorun); the others are listed by name.
	Ignored bool
	// Files, when set, makes the change a directory (Path ends in "/")
	// standing for that many ignored files changed since the start, too
	// many to list one by one.
	Files int
	// Autorun says, in a few words, why the file runs on its own on a
	// person's machine (policy.AutorunWhy): "" for other files.
	Autorun string
	// Link is the target of the file when it is a symbolic link now.
	Link string
	// Note says, in a few words, what else a reviewer must know: where a
	// link points when that is not a file the diff lists (into .git,
	// an ignored path, outside the workspace; Patch then shows the
	// content of the file it points to, when inside the workspace), NUL
	// bytes a text file gained (shown escaped), a git replace ref.
	Note string
	// NULs counts the NUL bytes of the file's new side when Patch shows
	// it as text all the same (NUL shown as ␀): git calls it binary.
	NULs int
	// Later is set when the file changed again after the run (by another
	// run, by hand; see [SinceStart]): Patch shows it as the run left it.
	Later bool
	// Outside is set for a file the run changed that also changed while
	// the run did nothing (paused, or waiting for a person: by a person
	// or another run): Patch includes that change too.
	Outside bool
}

// Base is what a diff compares a work tree with: a commit, and the
// ignore rules that held then.
type Base struct {
	Commit string
	// Exclude is the content of the repository's .git/info/exclude at
	// the start (see [InfoExclude]); nil: the file as it is now.
	Exclude *string
	// Since, when set, is when the run started: the files the rules of
	// the base ignore that changed since are listed too (Change.Ignored),
	// with the hooks and config of the repository's .git directory.
	Since time.Time
	// Refs, when set, are the refs at the start ([Refs]): the ones made,
	// moved or deleted since are listed too, under the repository's git
	// directory (.git/refs/heads/NAME, .git/refs/stash), with the
	// commits they gained. RefsAll says they are of every kind; else
	// only branches and tags are compared (runs journaled before, and
	// repositories with too many refs).
	Refs    map[string]string
	RefsAll bool
	// SinceExact says Since is the file system's own clock ([StartClock]):
	// a change time not before it is a change since; else Since is the
	// process's clock, which file times may lag, and a change time
	// within a slack before it counts too.
	SinceExact bool
	// Control, when set, are the digests of the .git directory's config
	// and hooks at the start ([GitControl]): those whose content differs
	// are listed; without it, those whose change time is after Since.
	Control map[string]string
}

// entry is a file of a base tree: its mode and blob, and the directory
// of the repository that holds the blob ("" the work tree's own; a
// nested repository's, for the files of a gitlink).
type entry struct{ mode, sha, repo string }

// ErrHistory is wrapped by [DiffFrom]'s error when git cannot read the
// base commit of the repository (its .git/objects or refs were deleted
// or damaged since, say by the run): [SinceStart] then falls back on
// the run's own checkpoints ([HistoryError]).
var ErrHistory = errors.New("the repository's history was damaged: git cannot read the run's start commit")

// maxNested bounds how deep repositories nested in repositories are
// followed.
const maxNested = 8

// DiffFrom compares the files of the work tree at dir with base's
// commit: files of the commit that changed or are gone, and files git
// does not ignore that the commit lacks. skip, if set, leaves out paths
// it returns true for. Changes are sorted by path. It is computed
// independently of what the work tree's own git state says now: file contents are read and compared here (the
// index, assume-unchanged and skip-worktree bits change nothing), and a
// new file counts as ignored only if the rules of base hold it ignored
// (the .gitignore files of base's commit, base's .git/info/exclude, the
// user's core.excludesFile). A file that only rules written since
// ignore is listed, with Hidden set. A repository nested in the work
// tree (a submodule, or one the run made, committed as a gitlink or
// not) is compared file by file too: with the files of the commit its
// gitlink in base names, or, when base has none (or its objects are
// not there), with nothing.
func DiffFrom(ctx context.Context, dir string, base Base, skip func(path string) bool) ([]Change, error) {
	changes, _, err := diffFrom(ctx, dir, base, nil, skip)
	return changes, err
}

// Upto is where a run left its files: its newest checkpoint (a tree of
// the store at Store) and when it last acted (its newest event).
type Upto struct {
	Store, Tree string
	Time        time.Time
}

// diffFrom is DiffFrom bounded by upto (nil: the work tree as it is
// now): a file that differs from upto's checkpoint now (or, one the
// checkpoint lacks, changed after upto's time) changed after the run,
// by another run or by hand. It is compared as the checkpoint holds it
// (the run's side, left out when that is the base's) and named in
// later, sorted.
func diffFrom(ctx context.Context, dir string, base Base, upto *Upto, skip func(path string) bool) (out []Change, later []string, err error) {
	files := map[string]entry{}
	links, forged, err := baseTree(ctx, dir, "", base.Commit, files)
	if err != nil {
		if _, gerr := git(ctx, dir, nil, "rev-parse", "--git-dir"); gerr == nil {
			err = fmt.Errorf("%w (%v)", ErrHistory, err)
		}
		return nil, nil, err
	}
	listed, err := git(ctx, dir, nil, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return nil, nil, err
	}
	paths := map[string]bool{}
	for p := range files {
		paths[p] = true
	}
	if err := listFiles(ctx, dir, "", listed, links, files, paths, 0); err != nil {
		return nil, nil, err
	}
	for _, f := range forged {
		// Files under a forged tree are unknown: every file there now is
		// shown whole.
		args := []string{"ls-files", "-z", "--cached", "--others", "--exclude-standard"}
		if f != "" {
			args = append(args, "--", ":(literal)"+f)
		}
		out, err := git(ctx, dir, nil, args...)
		if err != nil {
			return nil, nil, err
		}
		for _, p := range nul(out) {
			paths[p] = true
		}
	}
	underForged := func(p string) bool {
		for _, f := range forged {
			if strings.HasPrefix(p, f) {
				return true
			}
		}
		return false
	}
	hidden, still, err := hiddenFiles(ctx, dir, files, base.Exclude)
	if err != nil {
		return nil, nil, err
	}
	isHidden := map[string]bool{}
	for _, p := range hidden {
		paths[p], isHidden[p] = true, true
	}
	var left map[string]entry // the files of upto's checkpoint
	var store *Checkpoints
	if upto != nil {
		if store, err = ReadCheckpoints(ctx, upto.Store, dir); err != nil {
			return nil, nil, err
		}
		if left, err = store.files(ctx, upto.Tree); err != nil {
			return nil, nil, err
		}
		for p := range left {
			paths[p] = true
		}
	}
	isLater := map[string]bool{}
	compare := func(p, name string, cur []byte, kind byte) error {
		exists := kind != 0
		b, inBase := files[p]
		if underForged(p) && !inBase {
			if !exists {
				return nil
			}
			c := Change{Path: p, Status: Modified, Rewritten: true}
			c.patch(nil, cur)
			out = append(out, c)
			return nil
		}
		switch {
		case !inBase && !exists:
			return nil // listed in the index, gone from disk and from the commit
		case inBase && exists && hashObject("blob", cur).String() == b.sha && (b.mode == "120000") == (kind == 'l'):
			return nil
		}
		c := Change{Path: p, Status: Modified, Hidden: !inBase && isHidden[p]}
		var old []byte
		if inBase {
			if old, err = git(ctx, cmp.Or(b.repo, dir), nil, "cat-file", "blob", b.sha); err != nil {
				return err
			}
			if len(b.sha) == 40 && hashObject("blob", old).String() != b.sha {
				// The object store lies about the start: show the
				// file whole rather than a diff against a forgery.
				c.Rewritten, old = true, nil
			}
			if exists && (b.mode == "120000") != (kind == 'l') {
				c.Status = TypeChanged
			}
		} else {
			c.Status = Added
		}
		if !exists {
			c.Status, cur = Deleted, nil
		}
		if kind == 'l' {
			c.Link = string(cur)
			if shown, note := linkTarget(dir, p, paths); note != "" {
				c.Note = note
				if shown != nil {
					cur = shown
				}
			}
		}
		c.patch(old, cur)
		out = append(out, c)
		return nil
	}
	var back []string // later files the checkpoint holds
	for p := range paths {
		if skip != nil && skip(p) {
			continue
		}
		name := filepath.Join(dir, filepath.FromSlash(p))
		cur, kind, err := readKind(name)
		if err != nil {
			return nil, nil, err
		}
		if l, inLeft := left[p]; inLeft && (kind == 0 || (l.mode == "120000") != (kind == 'l') || hashObject("blob", cur).String() != l.sha) {
			isLater[p] = true
			back = append(back, p)
			continue
		}
		if _, inLeft := left[p]; left != nil && !inLeft && kind != 0 {
			// Not in the checkpoint: made since, or ignored then (by
			// rules the run wrote): its change time tells.
			if fi, err := os.Lstat(name); err == nil && !changeTime(fi).Before(upto.Time.Add(clockSlack)) {
				isLater[p] = true
				cur, kind = nil, 0
			}
		}
		if err := compare(p, name, cur, kind); err != nil {
			return nil, nil, err
		}
	}
	if len(back) > 0 {
		sort.Strings(back)
		ids := make([]string, len(back))
		for i, p := range back {
			ids[i] = left[p].sha
		}
		objs, err := store.objects(ctx, ids)
		if err != nil {
			return nil, nil, err
		}
		for _, p := range back {
			o, ok := objs[left[p].sha]
			if !ok || o.kind != "blob" {
				return nil, nil, fmt.Errorf("%w: %s in %s", ErrMissing, p, upto.Tree)
			}
			kind := byte('f')
			if left[p].mode == "120000" {
				kind = 'l'
			}
			if err := compare(p, filepath.Join(dir, filepath.FromSlash(p)), o.body, kind); err != nil {
				return nil, nil, err
			}
		}
	}
	if !base.Since.IsZero() {
		var until time.Time
		if upto != nil {
			until = upto.Time
		}
		start := base.Since
		if !base.SinceExact {
			start = start.Add(-clockSlack)
		}
		ig, since, err := ignoredChanges(dir, still, start, until, skip)
		if err != nil {
			return nil, nil, err
		}
		for _, p := range since {
			isLater[p] = true
		}
		gc, err := gitAutorun(ctx, dir, start, base.Control)
		if err != nil {
			return nil, nil, err
		}
		rc, err := replaceRefs(ctx, dir, start)
		if err != nil {
			return nil, nil, err
		}
		for _, c := range append(gc, rc...) {
			// Changed after the run: not its change.
			if fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(c.Path))); upto != nil && err == nil && !changeTime(fi).Before(until.Add(clockSlack)) {
				isLater[c.Path] = true
				continue
			}
			out = append(out, c)
		}
		out = append(out, ig...)
	}
	if base.Refs != nil {
		rc, err := refChanges(ctx, dir, base.Commit, base.Refs, base.RefsAll, gitDirShown(ctx, dir))
		if err != nil {
			return nil, nil, err
		}
		out = append(out, rc...)
	}
	for i := range out {
		out[i].Later = isLater[out[i].Path]
	}
	for p := range isLater {
		later = append(later, p)
	}
	sort.Strings(later)
	for i := range out {
		if out[i].Autorun == "" && out[i].Files == 0 {
			out[i].Autorun = cmp.Or(policy.AutorunWhy(out[i].Path), policy.ExecutesWhy(out[i].Path))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, later, nil
}

// baseTree adds to files the blobs of commit in the repository at
// dir/prefix (prefix "" or ending in "/"), their paths prefixed, each
// object hashed again (startFiles), and returns its gitlinks (path:
// commit) and its forged directories.
func baseTree(ctx context.Context, dir, prefix, commit string, files map[string]entry) (map[string]string, []string, error) {
	repo := ""
	if prefix != "" {
		repo = filepath.Join(dir, filepath.FromSlash(prefix))
	}
	found, links, forged, err := startFiles(ctx, cmp.Or(repo, dir), commit)
	if err != nil {
		return nil, nil, err
	}
	for p, e := range found {
		e.repo = repo
		files[prefix+p] = e
	}
	out := make(map[string]string, len(links))
	for p, c := range links {
		out[prefix+p] = c
	}
	for i, f := range forged {
		forged[i] = prefix + f
	}
	return out, forged, nil
}

// listFiles adds to paths the files of listed (the NUL-separated output
// of ls-files --cached --others --exclude-standard in the repository at
// dir/prefix, whose base gitlinks are links) and those of the
// repositories nested in it: a directory git lists (a gitlink in the
// index, or a repository the commit lacks, listed with a trailing
// slash), or a gitlink of the base. A nested repository whose gitlink
// commit is readable in it adds that commit's files to files and is
// listed by its own git; any other is walked whole: its files are new
// files of the run all the same, not hidden behind its own .git.
func listFiles(ctx context.Context, dir, prefix string, listed []byte, links map[string]string, files map[string]entry, paths map[string]bool, depth int) error {
	nested := map[string]bool{}
	for p := range links {
		nested[p] = true
	}
	for _, p := range strings.Split(string(listed), "\x00") {
		if p == "" {
			continue
		}
		p = prefix + p
		if strings.HasSuffix(p, "/") {
			nested[strings.TrimSuffix(p, "/")] = true
			continue
		}
		if fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(p))); err == nil && fi.IsDir() {
			nested[p] = true // a gitlink of the index
			continue
		}
		paths[p] = true
	}
	for p := range nested {
		root := filepath.Join(dir, filepath.FromSlash(p))
		if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
			continue // gone or replaced: its base files count as deleted
		}
		if _, err := os.Lstat(filepath.Join(root, ".git")); err == nil && links[p] != "" && depth < maxNested {
			sub := map[string]entry{}
			inner, forged, err := baseTree(ctx, dir, p+"/", links[p], sub)
			if err == nil && len(forged) == 0 { // else its start is unknown: walked whole
				out, err := git(ctx, root, nil, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
				if err != nil {
					return err
				}
				for q, e := range sub {
					files[q], paths[q] = e, true
				}
				if err := listFiles(ctx, dir, p+"/", out, inner, files, paths, depth+1); err != nil {
					return err
				}
				continue
			}
		}
		if err := nestedFiles(dir, p+"/", paths); err != nil {
			return err
		}
	}
	return nil
}

// nestedFiles adds to paths the files under sub (a directory of dir
// that holds a git repository of its own), its .git left out.
func nestedFiles(dir, sub string, paths map[string]bool) error {
	root := filepath.Join(dir, filepath.FromSlash(sub))
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == ".git" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		paths[filepath.ToSlash(rel)] = true
		return nil
	})
}

// linkTarget says where the symbolic link p of the work tree at dir
// points when that is not a file git lists (in paths, shown by itself):
// into a .git directory, a path git ignores, or outside the work tree.
// For a regular file inside the work tree it returns its content (at
// most maxFile bytes), which the diff shows in place of the link's text:
// it is what the link runs or reads. A file outside the work tree is
// named, never read.
func linkTarget(dir, p string, paths map[string]bool) (content []byte, note string) {
	top, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, ""
	}
	real, err := filepath.EvalSymlinks(filepath.Join(dir, filepath.FromSlash(p)))
	if err != nil {
		return nil, "" // dangling: the link's text is all there is
	}
	rel, err := filepath.Rel(top, real)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, "points outside the workspace, to " + real + ": its content is not shown"
	}
	rel = filepath.ToSlash(rel)
	if paths[rel] {
		return nil, ""
	}
	where := "points to " + rel + ", a path git ignores"
	if rel == ".git" || strings.HasPrefix(rel, ".git/") || strings.Contains(rel, "/.git/") {
		where = "points into git's own directory, to " + rel
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxFile {
		return nil, where + ": its content is not shown"
	}
	b, err := os.ReadFile(real)
	if err != nil {
		return nil, where + ": its content is not shown"
	}
	return b, where + ": the diff shows its content"
}

// readSide reads a file of the work tree (a symlink as its target, as
// git stores it); a missing file returns exists false.
func readSide(name string) (data []byte, exists bool, err error) {
	data, kind, err := readKind(name)
	return data, kind != 0, err
}

// readKind is readSide that also says what the file is: 'f' a regular
// file, 'l' a symbolic link, 0 none (missing, or a directory).
func readKind(name string) (data []byte, kind byte, err error) {
	fi, err := os.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(name)
		return []byte(t), 'l', err
	case !fi.Mode().IsRegular():
		return nil, 0, nil
	}
	b, err := os.ReadFile(name)
	return b, 'f', err
}

func (c *Change) patch(old, cur []byte) {
	if len(old) > maxFile || len(cur) > maxFile || isBinary(old) && !nulText(old) || isBinary(cur) && !nulText(cur) {
		c.Binary = true
		return
	}
	// A text file with NUL bytes (which git and most tools call binary,
	// yet sh still runs) is shown as text, each NUL as ␀: a NUL added to
	// a script must not hide the lines added with it.
	if n := bytes.Count(cur, []byte{0}); n > 0 {
		c.NULs = n
		if gained := n - bytes.Count(old, []byte{0}); gained > 0 {
			c.Note = joinNote(c.Note, fmt.Sprintf("%d NUL byte(s) added, shown as ␀: git calls the file binary", gained))
		} else {
			c.Note = joinNote(c.Note, fmt.Sprintf("%d NUL byte(s), shown as ␀: git calls the file binary", n))
		}
	}
	old, cur = escapeNUL(old), escapeNUL(cur)
	from, to := QuotePath("a/"+c.Path), QuotePath("b/"+c.Path)
	switch c.Status {
	case Added:
		from = "/dev/null"
	case Deleted:
		to = "/dev/null"
	}
	a, b := lines(old), lines(cur)
	text, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: a, B: b, FromFile: from, ToFile: to, Context: 3})
	c.Patch = text
	body := strings.SplitAfter(text, "\n")
	for _, l := range body[min(2, len(body)):] { // after the ---/+++ headers
		switch {
		case strings.HasPrefix(l, "+"):
			c.Added++
		case strings.HasPrefix(l, "-"):
			c.Removed++
		}
	}
}

// lines splits b into lines that keep their newline; a last line
// without one gets git's marker.
func lines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	l := strings.SplitAfter(string(b), "\n")
	if l[len(l)-1] == "" {
		l = l[:len(l)-1]
	} else {
		l[len(l)-1] += "\n\\ No newline at end of file\n"
	}
	return l
}

func isBinary(b []byte) bool { return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 }

// nulText reports whether b, which has NUL bytes, is text all the same:
// valid UTF-8 with no other control bytes than tab, line and page ends
// and escape, as a script with a NUL slipped in is and a compiled
// program, an image or an archive never is.
func nulText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 && c != 0 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v' && c != 0x1b {
			return false
		}
	}
	return true
}

// escapeNUL returns b with each NUL byte as ␀ (b itself when it has
// none).
func escapeNUL(b []byte) []byte {
	if bytes.IndexByte(b, 0) < 0 {
		return b
	}
	return bytes.ReplaceAll(b, []byte{0}, []byte("␀"))
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// FileDiff is the unified diff that turns old into cur for the file at
// path (old nil: the file is added), as a [Change] of [Diff] shows it.
func FileDiff(path string, old, cur []byte) Change {
	c := Change{Path: path, Status: Modified}
	if old == nil {
		c.Status = Added
	}
	c.patch(old, cur)
	return c
}

// QuotePath returns a file name as a line of a diff or a list of files
// can show it: unchanged when it holds no control character, double
// quote or backslash, else in double quotes with C escapes (\n, \t, \",
// \\, octal for other control bytes), as git quotes names
// (core.quotePath), so that a name with a newline cannot forge a line.
func QuotePath(p string) string {
	if !strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '"' || r == '\\' }) {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\v':
			b.WriteString(`\v`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			if c < 0x20 || c == 0x7f {
				fmt.Fprintf(&b, `\%03o`, c)
				continue
			}
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
