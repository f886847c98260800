package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/keel-run/keel/tool"
)

// A stdio server is code the run's own commands may be able to change:
// a script in the workspace, the modules it imports from there, a
// node_modules package, a virtual environment. Keel takes the digests
// of those files when it first starts the server in a run, and does not
// start it again (after it exited or was stopped, or on a resume) with
// other files unless a person approves: a hijacked model that rewrites
// the server and makes it restart would otherwise run its code with the
// server's environment, the secrets the operator gave the server
// included.

// FilesState prefixes the [tool.Tool].State of a stdio server's tool:
// the digest of the files the server was started with, or would be
// started with now.
const FilesState = "mcp-files:"

// root is a part of what a stdio server runs from the workspace: one
// file, or the files of a directory tree whose names match globs (every
// file when globs is nil).
type root struct {
	file  string // workspace-relative, or
	dir   string // workspace-relative ("." is the workspace)
	globs []string
}

// key names the root as journaled and shown: "srv/server.py",
// "srv/**/{*.py,*.pyc,*.so}", "node_modules/**".
func (r root) key() string {
	if r.file != "" {
		return r.file
	}
	p := ""
	if r.dir != "." {
		p = r.dir + "/"
	}
	if len(r.globs) == 0 {
		return p + "**"
	}
	return p + "**/{" + strings.Join(r.globs, ",") + "}"
}

// Module patterns, as the gate's autorun check names them.
var (
	pyGlobs = []string{"*.py", "*.pyc", "*.so"}
	jsGlobs = []string{"*.js", "*.mjs", "*.cjs", "*.ts", "*.mts", "*.cts", "*.json", "*.node"}
)

// serverRoots returns what a stdio server with argv runs from the
// workspace ws (its working directory): every argument that names a
// file in the workspace (the program itself included), the modules such
// a script may import from its directory (Python's and Node's), every
// node_modules and package.json from there up to the workspace, and a
// whole virtual environment or node_modules tree the file lies in.
func serverRoots(argv []string, ws *tool.Workspace) []root {
	var out []root
	add := func(r root) {
		if !slices.ContainsFunc(out, func(o root) bool { return o.key() == r.key() }) {
			out = append(out, r)
		}
	}
	prog := ""
	if len(argv) > 0 {
		prog = path.Base(argv[0])
	}
	for i, a := range argv {
		if v, ok := strings.CutPrefix(a, "-"); ok {
			if _, val, ok := strings.Cut(v, "="); ok {
				a = val
			} else {
				if strings.HasPrefix(prog, "python") && a == "-m" && i > 0 {
					// A module run from the working directory, which
					// Python puts first on its import path.
					add(root{dir: ".", globs: pyGlobs})
				}
				continue
			}
		}
		if !strings.Contains(a, "/") && !strings.Contains(path.Base(a), ".") {
			if i == 0 && (prog == "npx" || prog == "pnpx" || prog == "bunx") {
				// npx runs a package of the workspace's node_modules
				// before it looks anywhere else.
				add(root{dir: "node_modules"})
				add(root{file: "package.json"})
			}
			continue // a program name or a word
		}
		rel, err := ws.Rel(a)
		if err != nil || rel == "." {
			continue
		}
		if fi, err := ws.FS().Lstat(rel); err == nil && fi.IsDir() {
			continue // a directory the server serves, not code
		}
		add(root{file: rel})
		dir := path.Dir(rel)
		for d := dir; ; d = path.Dir(d) {
			if path.Base(d) == "node_modules" {
				add(root{dir: d})
			}
			if fi, err := ws.FS().Lstat(path.Join(d, "pyvenv.cfg")); err == nil && fi.Mode().IsRegular() {
				add(root{dir: d}) // a virtual environment: its packages
			}
			if d == "." {
				break
			}
		}
		switch path.Ext(rel) {
		case ".py":
			add(root{dir: dir, globs: pyGlobs})
		case ".js", ".mjs", ".cjs", ".ts", ".mts", ".cts":
			add(root{dir: dir, globs: jsGlobs})
			for d := dir; ; d = path.Dir(d) {
				add(root{dir: path.Join(d, "node_modules")})
				add(root{file: path.Join(d, "package.json")})
				if d == "." {
					break
				}
			}
		}
	}
	return out
}

// has reports whether the workspace file rel is one of r's.
func (r root) has(rel string) bool {
	if r.file != "" {
		return rel == r.file
	}
	if r.dir != "." && !strings.HasPrefix(rel, r.dir+"/") {
		return false
	}
	in := strings.TrimPrefix(rel, r.dir+"/")
	if slices.Contains(strings.Split(path.Dir(in), "/"), ".git") {
		return false
	}
	return len(r.globs) == 0 || slices.ContainsFunc(r.globs, func(g string) bool {
		ok, _ := path.Match(g, path.Base(rel))
		return ok
	})
}

// maxJournaledFiles bounds the digests of single files journaled with a
// server's roots ([Client.FileDigests]): enough to name the files that
// changed on a resume; past it, the roots are named.
const maxJournaledFiles = 200

// fileSet is the digests of what a stdio server runs: per root, and
// (when taken in this process) per file of each root.
type fileSet struct {
	roots map[string]string            // root key → digest
	files map[string]map[string]string // root key → file → digest; nil: not known
}

// sum is the digest of the whole set ("" when it has no root).
func (s *fileSet) sum() string {
	if s == nil || len(s.roots) == 0 {
		return ""
	}
	return digestOf(s.roots)
}

// state is the set as a tool's State ("" when it has no root).
func (s *fileSet) state() string {
	if sum := s.sum(); sum != "" {
		return FilesState + "sha256:" + sum
	}
	return ""
}

// digestOf hashes a map of names to digests, in name order.
func digestOf(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s\x00%s\n", k, m[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fingerprint takes the digests of roots in ws, through its [os.Root]
// (a link never leads Keel out of the workspace). A symbolic link counts
// by its target's name and, when it stays in the workspace, by the
// content it leads to; the .git directory is not walked.
func fingerprint(ws *tool.Workspace, roots []root) *fileSet {
	s := &fileSet{roots: map[string]string{}, files: map[string]map[string]string{}}
	for _, r := range roots {
		files := map[string]string{}
		if r.file != "" {
			files[r.file] = fileDigest(ws, r.file)
			s.roots[r.key()], s.files[r.key()] = files[r.file], files
			continue
		}
		_ = fs.WalkDir(ws.FS().FS(), r.dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p != r.dir {
					files[p] = "unreadable"
				}
				return nil
			}
			if d.IsDir() {
				if d.Name() == ".git" && p != r.dir {
					return fs.SkipDir
				}
				return nil
			}
			if len(r.globs) > 0 && !slices.ContainsFunc(r.globs, func(g string) bool {
				ok, _ := path.Match(g, d.Name())
				return ok
			}) {
				return nil
			}
			files[p] = fileDigest(ws, p)
			return nil
		})
		s.roots[r.key()], s.files[r.key()] = digestOf(files), files
	}
	return s
}

// fileDigest is the SHA-256 of a workspace file's content, "absent", or
// for a link "link:TARGET" and the digest of what it leads to.
func fileDigest(ws *tool.Workspace, rel string) string {
	fi, err := ws.FS().Lstat(rel)
	if err != nil {
		return "absent"
	}
	prefix := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ := ws.FS().Readlink(rel)
		prefix = "link:" + target + ":"
	} else if !fi.Mode().IsRegular() {
		return "special:" + fi.Mode().Type().String()
	}
	f, err := ws.FS().Open(rel)
	if err != nil {
		return prefix + "unreadable"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return prefix + "unreadable"
	}
	return prefix + hex.EncodeToString(h.Sum(nil))
}

// changes names what differs from was to now, for a person: the files
// when both sets know them, else the roots; at most ten, then a count.
func changes(was, now *fileSet) []string {
	var keys []string
	for k := range was.roots {
		keys = append(keys, k)
	}
	for k := range now.roots {
		if _, ok := was.roots[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		if was.roots[k] == now.roots[k] {
			continue
		}
		wf, nf := was.files[k], now.files[k]
		if wf == nil || nf == nil {
			out = append(out, "a file of "+k)
			continue
		}
		var names []string
		for f := range wf {
			names = append(names, f)
		}
		for f := range nf {
			if _, ok := wf[f]; !ok {
				names = append(names, f)
			}
		}
		slices.Sort(names)
		for _, f := range names {
			w, n := wf[f], nf[f]
			switch {
			case w == n:
			case w == "" || w == "absent":
				out = append(out, f+" (new)")
			case n == "" || n == "absent":
				out = append(out, f+" (removed)")
			default:
				out = append(out, f+" (changed)")
			}
		}
	}
	seen := map[string]bool{}
	out = slices.DeleteFunc(out, func(s string) bool {
		dup := seen[s]
		seen[s] = true
		return dup
	})
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("and %d more", len(out)-10))
	}
	return out
}

// Files returns the digests of what a stdio server runs from the
// workspace (by root: a file, or a directory's modules) as Keel first
// started it in this run, for run.created ([Options].Files of a later
// execution); nil when it runs nothing from the workspace.
func (c *Client) Files() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started == nil {
		return nil
	}
	return maps.Clone(c.started.roots)
}

// FileDigests returns the digest of each file of [Client.Files] when
// there are at most 200 (nil otherwise), for run.created: a later
// execution names the files that changed, not only their roots.
func (c *Client) FileDigests() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started == nil || c.started.files == nil {
		return nil
	}
	out := map[string]string{}
	for _, files := range c.started.files {
		for f, d := range files {
			out[f] = d
		}
	}
	if len(out) > maxJournaledFiles {
		return nil
	}
	return out
}

// journaled is the file set of digests journaled by root and, when
// known, by file.
func journaled(roots []root, byRoot, byFile map[string]string) *fileSet {
	s := &fileSet{roots: maps.Clone(byRoot)}
	if byFile == nil {
		return s
	}
	s.files = map[string]map[string]string{}
	for _, r := range roots {
		files := map[string]string{}
		for f, d := range byFile {
			if r.has(f) {
				files[f] = d
			}
		}
		if digestOf(files) != byRoot[r.key()] && r.file == "" {
			return &fileSet{roots: s.roots} // not the same files: name roots only
		}
		s.files[r.key()] = files
	}
	return s
}

// notStarted reports whether a stdio server has not been started in
// this process (its files changed since the run started it).
func (c *Client) notStarted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.srv.Command) > 0 && c.session == nil && !c.closed
}

// pending reports whether a stdio server must be started before its
// next call runs (it never was in this process, it exited, or Keel
// stopped it). c.mu is held.
func (c *Client) pending() bool {
	return len(c.srv.Command) > 0 && (c.session == nil || c.proc == nil || !c.proc.alive())
}

// filesHold is the reason a call of a stdio server's tools waits for a
// person ("" when it need not): the server must be started for it, and
// the files it runs from the workspace changed since Keel started it.
func (c *Client) filesHold() string {
	if len(c.roots) == 0 {
		return ""
	}
	c.mu.Lock()
	pending, was := c.pending(), c.started
	c.mu.Unlock()
	if !pending || was == nil {
		return ""
	}
	now := fingerprint(c.opts.Workspace, c.roots)
	if now.sum() == was.sum() {
		return ""
	}
	env := "the server's environment"
	if len(c.srv.SecretEnv) > 0 {
		env = "the server's environment, which holds the run's secrets " + strings.Join(c.srv.SecretEnv, ", ")
	}
	return fmt.Sprintf("the files the MCP server %s runs from the workspace changed since Keel started it, and it must start again for this call: %s; starting it runs that code in the sandbox with %s. Approve to start it with these files (%s)",
		c.srv.Name, strings.Join(changes(was, now), ", "), env, now.state())
}

// filesState is the State of a stdio server's tools: the files it runs
// with, or would start with now. A call approved when they were other
// files does not run.
func (c *Client) filesState(*tool.Request) string {
	c.mu.Lock()
	pending, was := c.pending(), c.started
	c.mu.Unlock()
	if !pending || was == nil {
		return was.state()
	}
	return fingerprint(c.opts.Workspace, c.roots).state()
}

// mayStart is asked before a call starts the server: nil when the files
// it runs from the workspace are those it was started with, or those a
// person approved for this very call ([tool.Request].Approved); else
// the call's result, and the server is not started.
func (c *Client) mayStart(req *tool.Request) *tool.Result {
	if len(c.roots) == 0 {
		return nil
	}
	now := fingerprint(c.opts.Workspace, c.roots)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started == nil || now.sum() == c.started.sum() {
		return nil
	}
	if req.Approved != "" && req.Approved == now.state() {
		c.started = now
		return nil
	}
	return tool.Errorf("not called: the files the MCP server %s runs from the workspace changed since Keel started it (%s), and it is not running; Keel starts it again with other files only when a person approves them. A new call of its tools asks a person for that approval (in a run nobody attends, none comes).",
		c.srv.Name, strings.Join(changes(c.started, now), ", "))
}

// Started reports whether the server runs (a stdio server whose files
// changed since the run started it is not started by [Connect]).
func (c *Client) Started() bool { return !c.notStarted() }
