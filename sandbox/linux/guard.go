//go:build linux

package linux

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The git guard keeps the host's git from running code the sandbox
// planted. A person who later runs git in the workspace (or in a
// repository nested in it, or in a worktree elsewhere that shares its
// git directory) makes git read, from the workspace, every git
// directory's config and config.worktree, its hooks, its commondir (a
// redirect to another git directory's config and hooks) and the .git
// files that point at git directories; `git status` even recurses into
// every nested repository the index registers as a submodule. Read-only
// bind mounts protect what exists when the sandbox starts; what the
// sandbox creates later (a new repository, a commondir, a submodule's
// git directory, a bare-looking directory) cannot be pre-protected
// without breaking git, so the guard checks the workspace after every
// command and at Close and moves anything unsafe to
// .keel/quarantine/<time>/<path>, saying so in the command's output.
//
// A git directory is a directory named .git, a directory holding HEAD and
// objects or commondir (a bare repository, the workspace root included),
// or the target of a .git file, a .git symbolic link or a commondir. In
// each, a control file (config, config.worktree, commondir, hooks and
// every hook) that is new or changed since the start must pass: a config
// only with keys known to run nothing (configProblem), a commondir only
// as git writes it for a linked worktree ("../.."), a hook only as a
// *.sample file git never runs. Protected paths of the run's policy that
// did not exist at the start must not appear at all.
//
// The start state is also written to .keel/sandbox/, which the sandbox
// cannot change, and removed at Close: if Keel dies without closing, the
// next sandbox on the workspace checks against the dead one's state
// first.

// guardVersion is the format of the persisted state.
const guardVersion = 1

// fileID identifies one version of a file: a write changes ctime, a
// replacement changes the inode.
type fileID struct {
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Mode  uint32 `json:"mode"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime"`
	Ctime int64  `json:"ctime"`
}

func idOf(fi fs.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{Mode: uint32(fi.Mode()), Size: fi.Size(), Mtime: fi.ModTime().UnixNano()}
	}
	return fileID{Dev: st.Dev, Ino: st.Ino, Mode: st.Mode, Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}
}

// Quarantine is one path the git guard moved out of the way, made
// readable to itself, or could not make safe.
type Quarantine struct {
	// Path is the workspace-relative path (slash-separated).
	Path string
	// MovedTo is where it is now, relative to the workspace, or "" when
	// it could only be removed, was made readable (see Action) or could
	// not be moved at all (see Err).
	MovedTo string
	// Action is what the guard did: [ActionMoved], [ActionRemoved],
	// [ActionReadable], or "" when Err is set.
	Action string
	// Reason says why, in words for the model and the person.
	Reason string
	// Err is set when the path could be neither moved nor removed; the
	// workspace is then unsafe for the host's git until someone looks,
	// and the sandbox refuses further commands (see [ErrUnsafeWorkspace]).
	Err error
}

// Values of [Quarantine].Action.
const (
	// ActionMoved: the path was moved to Quarantine.MovedTo.
	ActionMoved = "moved"
	// ActionRemoved: the path could not be moved and was removed.
	ActionRemoved = "removed"
	// ActionReadable: a directory the guard could not read, owned by
	// Keel's user, got its owner's read, write and search permission back
	// and was then checked like any other. Keel does this only for its
	// own user's directories, which the sandbox could change anyway.
	ActionReadable = "made readable"
)

// ErrUnsafeWorkspace is wrapped by the error of every command after the
// git guard found something it could neither check nor move out of the
// way: the host's git could run a program from the workspace, so the
// sandbox refuses to run more until a person has looked (and resumed the
// run with a new sandbox).
var ErrUnsafeWorkspace = errors.New("sandbox/linux: the workspace is unsafe for the host's git")

// String words q as Keel reports it in a command's output.
func (q Quarantine) String() string {
	switch {
	case q.Err != nil:
		return fmt.Sprintf("keel: DANGER: %s: %s, and it could not be quarantined (%v); do not run git in this workspace on the host before removing it; no more commands run in this sandbox", q.Path, q.Reason, q.Err)
	case q.Action == ActionReadable:
		return fmt.Sprintf("keel: made %s readable to the git check: %s", q.Path, q.Reason)
	case q.MovedTo == "":
		return fmt.Sprintf("keel: quarantined %s by removing it: %s", q.Path, q.Reason)
	}
	return fmt.Sprintf("keel: quarantined %s (moved to %s): %s", q.Path, q.MovedTo, q.Reason)
}

// guard is the git guard of one sandbox. Its methods are safe for
// concurrent use; checks run one at a time.
type guard struct {
	root *os.Root // the workspace
	dir  string   // its host real path

	mu     sync.Mutex
	snap   map[string]fileID // control files at the start
	absent []string          // policy paths missing at the start
	incl   []string          // missing files that a config present at the start includes
	dirs   []string          // git directories at the start
	record string            // the persisted state's name in store ("" if none)
	store  stateStore        // where the start state is persisted
	euid   int               // Keel's user, whose directories the walker may make readable
	seq    int
	cache  map[string]*dirCache // the walker's view of the last walk
	// passed holds the control files found safe by the last check, so
	// unchanged ones are not read again; passing collects this check's.
	passed, passing map[string]fileID
	margin          time.Duration // racyMargin; benchmarks lower it
	// blocked lists what the guard could neither check nor move away
	// (sticky: commands are refused from then on).
	blocked []string
	// notes are report lines of checks that ran outside a command (the
	// periodic check), for the next command's output.
	notes []string
	// mount is the workspace's path inside the sandbox. live says that
	// the host path leads to the workspace inside too (the init's alias),
	// so paths git stored under mount are rewritten after every check;
	// closing says nothing runs in the sandbox any more, so they are
	// rewritten anyway (see relocate).
	mount         string
	live, closing bool
}

// relocation tells the guard where the sandbox shows the workspace and
// whether the host path leads there inside too.
func (g *guard) relocation(mount string, live bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mount, g.live = mount, live
}

// relocate rewrites the paths git recorded inside the sandbox, under the
// mount path, to the workspace's host path, so that the host's git finds
// them: the "gitdir:" line of a .git file (a linked worktree made with
// `git worktree add`) and the gitdir file of a linked worktree
// (<gitdir>/worktrees/<id>/gitdir), which otherwise leave the worktree
// broken and prunable on the host. Paths in skip (about to be
// quarantined) are left alone. Only an exact mount-path prefix is
// rewritten; each file is replaced whole, through the workspace's root.
func (g *guard) relocate(w *walker, dirs []string, skip map[string]bool) {
	m, h := path.Clean(g.mount), filepath.ToSlash(g.dir)
	if g.mount == "" || m == h || !(g.live || g.closing) {
		return
	}
	rewrite := func(p, prefix string) {
		if skip[p] {
			return
		}
		fi, err := g.root.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			return
		}
		b, err := readSmall(g.root, p, maxGitFile)
		if err != nil || len(b) > maxGitFile {
			return
		}
		rest, ok := strings.CutPrefix(strings.TrimSpace(string(b)), prefix)
		if !ok {
			return
		}
		rest, ok = strings.CutPrefix(strings.TrimSpace(rest), m+"/")
		if !ok || strings.ContainsAny(rest, "\n\r") {
			return
		}
		tmp := p + ".keel-relocate"
		f, err := g.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fi.Mode().Perm())
		if err != nil {
			return
		}
		_, err = f.WriteString(prefix + h + "/" + rest + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = g.root.Rename(tmp, p)
		}
		if err != nil {
			g.root.Remove(tmp)
		}
	}
	for _, l := range w.links {
		rewrite(l, "gitdir: ")
	}
	for _, d := range dirs {
		if path.Base(path.Dir(d)) == "worktrees" {
			rewrite(path.Join(d, "gitdir"), "")
		}
	}
}

// controlNames are the entries of a git directory that make git run a
// program or read another git directory; "hooks" is expanded to its
// entries.
var controlNames = []string{"config", "config.worktree", "commondir", "hooks"}

// newGuard takes the start state of the workspace at dir (opened as
// root): every git directory and the identity of its control files and
// .git files. absent lists the policy's protected paths that do not
// exist. Directories of Keel's user that the walk could not read are
// made readable first and returned; a directory it can still not check
// (not Keel's user's, searchable but not listable, or too deep) is an
// error: the sandbox would otherwise start with a blind spot.
func newGuard(root *os.Root, dir string, absent []string) (*guard, []Quarantine, error) {
	g := &guard{root: root, dir: dir, snap: map[string]fileID{}, absent: slices.Clone(absent), margin: racyMargin, euid: os.Geteuid(),
		store: stateStore{root: root, dir: guardDir, inWorkspace: true}}
	w, err := g.walk()
	if err != nil {
		return nil, nil, err
	}
	if len(w.unsafe) > 0 {
		var list []string
		for _, u := range w.unsafe {
			list = append(list, u.path+" ("+u.reason+")")
		}
		return nil, nil, fmt.Errorf("sandbox/linux: the git check cannot look into %s; a repository planted there would go unchecked, so the sandbox does not start: make it readable by uid %d or move it out of the workspace", strings.Join(list, "; "), g.euid)
	}
	g.dirs = g.gitDirs(w)
	for _, d := range g.dirs {
		for _, p := range g.controlPaths(d) {
			if fi, err := root.Lstat(p); err == nil {
				g.snap[p] = idOf(fi)
			}
		}
	}
	for _, l := range w.links {
		if fi, err := root.Lstat(l); err == nil {
			g.snap[l] = idOf(fi)
		}
	}
	return g, fixedReports(w), nil
}

// fixedReports words the directories a walk made readable.
func fixedReports(w *walker) []Quarantine {
	var out []Quarantine
	for _, f := range w.fixed {
		out = append(out, Quarantine{Path: f.path, Action: ActionReadable, Reason: fmt.Sprintf(
			"the git check could not read this directory (mode %04o), so a repository in it would have gone unchecked; Keel gave its owner read, write and search permission (mode %04o) and checked it", f.from, f.to)})
	}
	return out
}

// sequenceDirs are where git keeps a rebase, an am, a cherry-pick or a
// revert in progress; sequenceFiles the files in them that say what
// git rebase --continue (git cherry-pick --continue...) does next: the
// todo list, whose exec lines run commands, and the merge strategy,
// which names a program git-merge-NAME.
var (
	sequenceDirs  = []string{"rebase-merge", "rebase-apply", "sequencer"}
	sequenceFiles = []string{"git-rebase-todo", "todo", "strategy", "opts"}
)

// controlPaths lists the control paths of git directory d that exist:
// config, config.worktree, commondir, hooks and every entry of hooks,
// and the state of an operation in progress (sequenceDirs).
func (g *guard) controlPaths(d string) []string {
	var out []string
	for _, s := range sequenceDirs {
		for _, n := range append([]string{""}, sequenceFiles...) {
			p := path.Join(d, s, n)
			if _, err := g.root.Lstat(p); err == nil {
				out = append(out, p)
			}
		}
	}
	for _, n := range controlNames {
		p := path.Join(d, n)
		fi, err := g.root.Lstat(p)
		if err != nil {
			continue
		}
		out = append(out, p)
		if n == "hooks" && fi.IsDir() {
			if ents, err := readDirNames(g.root, p); err == nil {
				for _, e := range ents {
					out = append(out, path.Join(p, e))
				}
			}
		}
	}
	return out
}

// check looks at the workspace now, quarantines what is unsafe, and
// returns what it did: paths moved, removed or made readable, and those
// it could not handle (with Err set, after which [guard.unsafe] refuses
// commands), plus warnings.
func (g *guard) check() ([]Quarantine, []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.passing = map[string]fileID{}
	defer func() { g.passed, g.passing = g.passing, nil }()
	w, err := g.walk()
	if err != nil {
		// The workspace itself cannot be opened: nothing can be checked.
		q := Quarantine{Path: ".", Reason: "the git check cannot open the workspace", Err: err}
		g.blocked = append(g.blocked, q.String())
		return []Quarantine{q}, nil
	}
	out := fixedReports(w)
	dirs := g.gitDirs(w)
	type finding struct{ path, reason string }
	var found []finding
	for _, u := range w.unsafe {
		found = append(found, finding{u.path, u.reason + ", so a git repository in it would go unchecked"})
	}
	for _, d := range dirs {
		for _, f := range g.checkDir(d) {
			found = append(found, finding{f[0], f[1]})
		}
	}
	for _, l := range w.links {
		if r := g.checkGitFile(l); r != "" {
			found = append(found, finding{l, r})
		}
	}
	for _, p := range g.absent {
		if _, err := g.root.Lstat(p); err == nil {
			found = append(found, finding{p, "it is a protected path of this run, which did not exist when the sandbox started and may not be created"})
		}
	}
	for _, p := range g.incl {
		if _, err := g.root.Lstat(p); err == nil {
			found = append(found, finding{p, "a git config of this workspace includes this file, so the host's git would read it as configuration; it may not be created"})
		}
	}
	skip := map[string]bool{}
	for _, f := range found {
		skip[f.path] = true
	}
	g.relocate(w, dirs, skip)
	if len(found) == 0 {
		return out, nil
	}
	g.seq++
	stamp := fmt.Sprintf("%s-%d-%d", time.Now().UTC().Format("20060102T150405.000000Z"), os.Getpid(), g.seq)
	seen := map[string]bool{}
	for _, f := range found {
		if seen[f.path] || underAny(f.path, seen) {
			continue
		}
		seen[f.path] = true
		q := g.quarantine(stamp, f.path, f.reason)
		if q.Err != nil {
			g.blocked = append(g.blocked, q.String())
		}
		out = append(out, q)
	}
	return out, nil
}

// underAny reports whether p lies below one of the paths in set (already
// moved with it).
func underAny(p string, set map[string]bool) bool {
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		if set[d] {
			return true
		}
	}
	return false
}

// unsafe returns an error wrapping [ErrUnsafeWorkspace] once a check
// found something it could neither check nor move away, and nil before.
func (g *guard) unsafe() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.blocked) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; a person must look at the workspace before more commands run (then resume the run)", ErrUnsafeWorkspace, strings.Join(g.blocked, "; "))
}

// note keeps report lines for the next command's output; takeNotes
// returns and clears them.
func (g *guard) note(lines ...string) {
	g.mu.Lock()
	g.notes = append(g.notes, lines...)
	if len(g.notes) > 100 {
		g.notes = append(g.notes[:1:1], g.notes[len(g.notes)-99:]...)
	}
	g.mu.Unlock()
}

func (g *guard) takeNotes() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.notes
	g.notes = nil
	return n
}

// checkDir checks the control files of git directory d and returns
// [path, reason] pairs for the unsafe ones.
func (g *guard) checkDir(d string) [][2]string {
	var bad [][2]string
	for _, n := range []string{"config", "config.worktree"} {
		p := path.Join(d, n)
		if r := g.checkConfig(p); r != "" {
			bad = append(bad, [2]string{p, r})
		}
	}
	p := path.Join(d, "commondir")
	if fi, err := g.root.Lstat(p); err == nil && !g.same(p, fi) {
		if r := g.commondirProblem(d, p, fi); r != "" {
			bad = append(bad, [2]string{p, r})
		}
	}
	for _, s := range sequenceDirs {
		p := path.Join(d, s)
		if r := g.sequenceProblem(p); r != "" {
			bad = append(bad, [2]string{p, r})
		}
	}
	hooks := path.Join(d, "hooks")
	fi, err := g.root.Lstat(hooks)
	switch {
	case err != nil:
	case !fi.IsDir():
		if !g.same(hooks, fi) {
			bad = append(bad, [2]string{hooks, "it replaces a git hooks directory; git would run what it points to"})
		}
	default:
		names, err := readDirNames(g.root, hooks)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			bad = append(bad, [2]string{hooks, "it is a git hooks directory the git check cannot list (" + err.Error() + "), and git would run what is in it"})
		}
		for _, n := range names {
			h := path.Join(hooks, n)
			if strings.HasSuffix(n, ".sample") {
				continue
			}
			if hf, err := g.root.Lstat(h); err == nil && !g.same(h, hf) {
				bad = append(bad, [2]string{h, "it is a git hook, which git on the host would run"})
			}
		}
	}
	return bad
}

// maxTodo is the largest todo list or options file of an operation in
// progress the guard reads; a larger new one is quarantined unread.
const maxTodo = 1 << 20

// builtinStrategies are the merge strategies git carries out itself; any
// other name makes git run a program git-merge-NAME.
var builtinStrategies = []string{"ort", "recursive", "resolve", "octopus", "ours", "subtree"}

// sequenceProblem judges the state of a rebase, am, cherry-pick or revert
// in progress that is new or changed since the start (p is one of
// sequenceDirs of a git directory): the host's git rebase --continue
// carries out its todo list, whose exec lines run commands, and its
// merge strategy, which may name a program. A todo list of picks, edits
// and the like passes, so that a rebase stopped on a conflict goes on.
func (g *guard) sequenceProblem(p string) string {
	const left = "it is a rebase or cherry-pick the run left in progress"
	fi, err := g.root.Lstat(p)
	switch {
	case err != nil:
		return ""
	case !fi.IsDir():
		if g.same(p, fi) {
			return ""
		}
		return left + ", and not a directory git would read as one"
	}
	for _, n := range sequenceFiles {
		f := path.Join(p, n)
		fi, err := g.root.Lstat(f)
		if err != nil || g.same(f, fi) {
			continue
		}
		if !fi.Mode().IsRegular() {
			return left + "; its " + n + " is a symbolic link or special file"
		}
		b, err := readSmall(g.root, f, maxTodo)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return left + "; the git check cannot read its " + n + " (" + err.Error() + ")"
		case len(b) > maxTodo:
			return left + "; its " + n + " is larger than 1 MiB"
		}
		if r := sequenceText(n, string(b)); r != "" {
			return left + ": " + r
		}
		g.pass(f, idOf(fi))
	}
	return ""
}

// sequenceText says why a todo list or strategy file of an operation in
// progress (named n) makes git run a program when it goes on ("" when
// it does not).
func sequenceText(n, text string) string {
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		word := strings.Fields(line)[0]
		key, v, _ := strings.Cut(line, "=")
		v = strings.Trim(strings.TrimSpace(v), `"`)
		switch {
		case (n == "git-rebase-todo" || n == "todo") && (word == "exec" || word == "x"):
			return "its todo list runs a command (" + line + ") when git rebase --continue goes on"
		case n == "strategy" && !slices.Contains(builtinStrategies, line):
			return "its merge strategy " + line + " makes git run the program git-merge-" + line
		case n == "opts" && strings.EqualFold(strings.TrimSpace(key), "strategy") && !slices.Contains(builtinStrategies, v):
			return "its merge strategy " + v + " makes git run the program git-merge-" + v
		}
	}
	return ""
}

// same reports whether p is the file it was at the start, or the file
// the last check found safe.
func (g *guard) same(p string, fi fs.FileInfo) bool {
	id := idOf(fi)
	if old, ok := g.snap[p]; ok && old == id {
		return true
	}
	if old, ok := g.passed[p]; ok && old == id {
		g.pass(p, id)
		return true
	}
	return false
}

// pass records that p, as id, was found safe in this check.
func (g *guard) pass(p string, id fileID) {
	if g.passing != nil {
		g.passing[p] = id
	}
}

// maxConfig is the largest config the guard reads; larger ones are
// quarantined unread.
const maxConfig = 1 << 20

// checkConfig returns why the config file p is unsafe, or "".
func (g *guard) checkConfig(p string) string {
	fi, err := g.root.Lstat(p)
	if err != nil || g.same(p, fi) {
		return ""
	}
	if !fi.Mode().IsRegular() {
		return "it is a symbolic link or special file where git reads a config file"
	}
	data, err := readSmall(g.root, p, maxConfig)
	if errors.Is(err, errNotRegular) {
		return "it is a symbolic link or special file where git reads a config file"
	}
	if errors.Is(err, fs.ErrNotExist) {
		return "" // gone meanwhile
	}
	if err != nil {
		return "it is a git config file the git check cannot read (" + err.Error() + ")"
	}
	if len(data) > maxConfig {
		return "it is a git config file larger than 1 MiB"
	}
	if r := configProblem(data); r != "" {
		return "it is a git config file the host's git would read, and " + r
	}
	g.pass(p, idOf(fi))
	return ""
}

// commondirProblem judges a new or changed commondir: git writes one only
// in a linked worktree's directory (<gitdir>/worktrees/<id>), as "../..".
func (g *guard) commondirProblem(d, p string, fi fs.FileInfo) string {
	const why = "it redirects git to another git directory's config and hooks"
	if !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return why
	}
	b, err := readSmall(g.root, p, 4096)
	if errors.Is(err, errNotRegular) || len(b) > 4096 {
		return why
	}
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		return why + "; the git check cannot read it (" + err.Error() + ")"
	}
	if strings.TrimSpace(string(b)) != "../.." || path.Base(path.Dir(d)) != "worktrees" {
		return why + " (" + strings.TrimSpace(string(b)) + ")"
	}
	g.pass(p, idOf(fi))
	return ""
}

// maxGitFile is the largest .git file the guard accepts; git writes a
// line of "gitdir: PATH".
const maxGitFile = 4096

// checkGitFile judges a ".git" entry that is not a directory: a symbolic
// link is followed like git does (its target, when inside the workspace,
// is checked as a git directory); a file must be one the guard can read
// and follow (at most 4 KiB: git would follow a longer one that the
// guard could not); anything else (a FIFO, a socket) has no business
// there. Unchanged ones pass.
func (g *guard) checkGitFile(p string) string {
	fi, err := g.root.Lstat(p)
	if err != nil || g.same(p, fi) {
		return ""
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return ""
	case !fi.Mode().IsRegular():
		return "it is a special file where git reads a .git file"
	case fi.Size() > maxGitFile:
		return "it is a .git file larger than 4 KiB, which git would follow to another git directory but the git check does not read"
	}
	b, err := readSmall(g.root, p, maxGitFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ""
	case err != nil:
		return "it is a .git file the git check cannot read (" + err.Error() + "), which git would follow to another git directory"
	case len(b) > maxGitFile:
		return "it is a .git file larger than 4 KiB, which git would follow to another git directory but the git check does not read"
	}
	g.pass(p, idOf(fi))
	return ""
}

// quarantine moves p to .keel/quarantine/<stamp>/p, or removes it if it
// cannot be moved, and records the reason next to it.
func (g *guard) quarantine(stamp, p, reason string) Quarantine {
	q := Quarantine{Path: p, Reason: reason}
	base := path.Join(".keel", "quarantine", stamp)
	dst := path.Join(base, p)
	err := mkdirAllLike(g.root, path.Dir(dst), ".keel")
	if err == nil {
		ignoreKeel(g.root)
		err = g.root.Rename(p, dst)
		if denied(err) && g.ownerWrite(p) {
			err = g.root.Rename(p, dst)
		}
	}
	if err == nil {
		q.MovedTo, q.Action = dst, ActionMoved
	} else if rerr := g.root.RemoveAll(p); rerr == nil {
		q.Action = ActionRemoved
	} else {
		q.Err = fmt.Errorf("move: %w; remove: %w", err, rerr)
		return q
	}
	if f, err := g.root.OpenFile(path.Join(base, "REASONS"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintf(f, "%s: %s\n", p, reason)
		f.Close()
	}
	return q
}

// ignoreKeel makes git ignore the workspace's .keel directory, made to
// hold a quarantine: a .gitignore in it that ignores everything, so
// that the person's git status does not list .keel/ (git status lists
// no directory whose files are all ignored). An existing one is kept.
func ignoreKeel(root *os.Root) {
	if f, err := root.OpenFile(path.Join(".keel", ".gitignore"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
		fmt.Fprint(f, "# Keel's quarantine of files the sandbox wrote (see REASONS in each): not part of the project.\n*\n")
		f.Close()
	}
}

// ownerWrite gives Keel's user write and search permission on the
// directory holding p, and on p when it is a directory, where this user
// owns them and lacks it (so that p can be moved out), and reports
// whether it changed anything.
func (g *guard) ownerWrite(p string) bool {
	fd, err := openWorkspace(g.dir)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	w := &walker{rootfd: fd, euid: g.euid}
	changed := false
	for _, d := range []string{path.Dir(p), p} {
		var st unix.Stat_t
		if w.stat(d, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != g.euid || st.Mode&0o300 == 0o300 {
			continue
		}
		dfd := fd
		if d != "." {
			if dfd, err = w.open(d, unix.O_PATH|unix.O_NOFOLLOW); err != nil {
				continue
			}
		}
		if unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(dfd), st.Mode&0o7777|0o700, 0) == nil {
			changed = true
		}
		if dfd != fd {
			unix.Close(dfd)
		}
	}
	return changed
}

// walk walks the workspace from the root (see [walker]).
func (g *guard) walk() (*walker, error) {
	fd, err := openWorkspace(g.dir)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	w := &walker{rootfd: fd, euid: g.euid, prev: g.cache, next: map[string]*dirCache{},
		since: time.Now().Add(-g.margin).UnixNano()}
	w.visit(".")
	g.cache = w.next
	return w, nil
}

// gitDirs returns the git directories of a walk (see the comment at the
// top), sorted: those the walker found, and the targets of .git files
// and links and of commondir files inside the workspace.
func (g *guard) gitDirs(w *walker) []string {
	set := map[string]bool{}
	queue := slices.Clone(w.dirs)
	for _, l := range w.links {
		if t := g.target(l, true); t != "" {
			queue = append(queue, t)
		}
	}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if set[d] {
			continue
		}
		set[d] = true
		if t := g.target(path.Join(d, "commondir"), false); t != "" {
			queue = append(queue, t)
		}
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// target resolves an indirection to a directory inside the workspace, as
// the host's git would: a .git symbolic link or "gitdir: X" file when
// gitfile, else a commondir file, relative to the directory holding it.
// It returns the workspace-relative real path, or "" when the target is
// outside the workspace, missing or not a directory.
func (g *guard) target(p string, gitfile bool) string {
	host := filepath.Join(g.dir, filepath.FromSlash(p))
	fi, err := os.Lstat(host)
	if err != nil {
		return ""
	}
	var to string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0 && gitfile:
		to = host
	case fi.Mode().IsRegular() && fi.Size() <= 4096:
		b, err := readSmall(g.root, p, 4096)
		if err != nil || len(b) > 4096 {
			return ""
		}
		s := strings.TrimSpace(string(b))
		if gitfile {
			var ok bool
			if s, ok = strings.CutPrefix(s, "gitdir:"); !ok {
				return ""
			}
			s = strings.TrimSpace(s)
		}
		if s == "" {
			return ""
		}
		to = s
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(host), to)
		}
	default:
		return ""
	}
	real, err := filepath.EvalSymlinks(to)
	if err != nil {
		return ""
	}
	rel, err := filepath.Rel(g.dir, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return ""
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return ""
	}
	return filepath.ToSlash(rel)
}

// readDirNames lists the names in directory p of root.
func readDirNames(root *os.Root, p string) ([]string, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// errNotRegular is readSmall's error for anything but a regular file.
var errNotRegular = errors.New("not a regular file")

// readSmall reads at most max+1 bytes of the regular file p in root,
// without following a final symbolic link and without blocking on a FIFO
// or device swapped in meanwhile; a longer file returns max+1 bytes.
func readSmall(root *os.Root, p string, max int64) ([]byte, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, errNotRegular
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errNotRegular
	}
	return io.ReadAll(io.LimitReader(f, max+1))
}
