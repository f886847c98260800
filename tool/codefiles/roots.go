package codefiles

import (
	"bytes"
	"io"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/keel-run/keel/tool"
)

// Module patterns, as the gate's autorun check names them.
var (
	pyGlobs = []string{"*.py", "*.pyc", "*.so"}
	jsGlobs = []string{"*.js", "*.mjs", "*.cjs", "*.ts", "*.mts", "*.cts", "*.json", "*.node"}
)

// roots collects roots, each once.
type roots []Root

func (out *roots) add(r Root) {
	if !slices.ContainsFunc(*out, func(o Root) bool { return o.Key() == r.Key() }) {
		*out = append(*out, r)
	}
}

// file adds the workspace file rel and what running it may load: the
// modules a script may import from its directory (Python's and
// Node's), every node_modules and package.json from there up to the
// workspace, and a whole virtual environment or node_modules tree the
// file lies in.
func (out *roots) file(ws *tool.Workspace, rel string) {
	out.add(Root{File: rel})
	dir := path.Dir(rel)
	for d := dir; ; d = path.Dir(d) {
		if path.Base(d) == "node_modules" {
			out.add(Root{Dir: d})
		}
		if fi, err := ws.FS().Lstat(path.Join(d, "pyvenv.cfg")); err == nil && fi.Mode().IsRegular() {
			out.add(Root{Dir: d}) // a virtual environment: its packages
		}
		if d == "." {
			break
		}
	}
	switch path.Ext(rel) {
	case ".py":
		out.add(Root{Dir: dir, Globs: pyGlobs})
	case ".js", ".mjs", ".cjs", ".ts", ".mts", ".cts":
		out.add(Root{Dir: dir, Globs: jsGlobs})
		for d := dir; ; d = path.Dir(d) {
			out.add(Root{Dir: path.Join(d, "node_modules")})
			out.add(Root{File: path.Join(d, "package.json")})
			if d == "." {
				break
			}
		}
	}
}

// shells are the programs whose arguments are a script (`sh -c
// "python server.py"`) or name one (`bash start.sh`).
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true, "busybox": true}

// uvProject are the files `uv run` makes the project's environment from
// before it runs the command in it.
var uvProject = []string{"pyproject.toml", "uv.lock", "setup.py", "setup.cfg", ".python-version"}

// ServerRoots returns what a stdio server with argv and env (the
// server's own KEY=VALUE entries) runs from the workspace ws (its
// working directory): every argument that names a file in the workspace
// (the program itself included) and what running it may load (see
// roots.file); the workspace's node_modules for npx; for a shell (`sh
// -c "python server.py"`, `bash start.sh`), what its script names, by
// the word analysis of a setup script ([ScriptRoots]); for `uv run`,
// the project's files and its virtual environment; and the workspace
// directories and archives of PYTHONPATH and NODE_PATH in env.
func ServerRoots(argv, env []string, ws *tool.Workspace) []Root {
	var out roots
	prog := ""
	if len(argv) > 0 {
		prog = path.Base(argv[0])
	}
	shell := shells[prog]
	if shell {
		// Each argument is read as a setup script's words: a -c
		// script's as well as a script file's name (whose text is
		// read in turn).
		for _, r := range ScriptRoots(strings.Join(argv, "\n"), ws) {
			out.add(r)
		}
	}
	uv := (prog == "uv" || prog == "uvx") && len(argv) > 1 && (argv[1] == "run" || prog == "uvx")
	if uv {
		for _, f := range uvProject {
			out.add(Root{File: f})
		}
		venv := ".venv"
		if v := envValue(env, "UV_PROJECT_ENVIRONMENT"); v != "" {
			if rel, err := ws.Rel(v); err == nil {
				venv = rel
			} else {
				venv = ""
			}
		}
		if venv != "" && venv != "." {
			out.add(Root{Dir: venv}) // the environment it runs in
		}
	}
	for _, p := range filepath.SplitList(envValue(env, "PYTHONPATH")) {
		if p == "" {
			p = "." // the working directory
		}
		if rel, err := ws.Rel(p); err == nil && rel != "" {
			if fi, err := ws.FS().Lstat(rel); err == nil && !fi.IsDir() || err != nil && slices.Contains([]string{".zip", ".egg", ".whl"}, path.Ext(rel)) {
				out.add(Root{File: rel}) // an archive Python imports from
			} else {
				out.add(Root{Dir: rel, Globs: append([]string{"*.pth", "*.zip"}, pyGlobs...)})
			}
		}
	}
	for _, p := range filepath.SplitList(envValue(env, "NODE_PATH")) {
		if rel, err := ws.Rel(p); err == nil && rel != "" {
			out.add(Root{Dir: rel}) // every file: packages, as node_modules
		}
	}
	for i, a := range argv {
		if shell {
			break // a -c script is not a file name
		}
		if v, ok := strings.CutPrefix(a, "-"); ok {
			if _, val, ok := strings.Cut(v, "="); ok {
				a = val
			} else {
				if (strings.HasPrefix(prog, "python") || uv) && a == "-m" && i > 0 {
					// A module run from the working directory, which
					// Python puts first on its import path.
					out.add(Root{Dir: ".", Globs: pyGlobs})
				}
				continue
			}
		}
		if !strings.Contains(a, "/") && !strings.Contains(path.Base(a), ".") {
			if i == 0 && (prog == "npx" || prog == "pnpx" || prog == "bunx") {
				// npx runs a package of the workspace's node_modules
				// before it looks anywhere else.
				out.add(Root{Dir: "node_modules"})
				out.add(Root{File: "package.json"})
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
		out.file(ws, rel)
	}
	return out
}

// envValue is the value of key in env (KEY=VALUE entries; the last
// wins, as for a process), "" when it has none.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// The bounds of a setup script's roots: how deep Keel follows the
// names in a file the script runs, how many roots it takes, and the
// size of a file it reads for names.
const (
	maxDepth     = 4
	maxRoots     = 400
	maxScanBytes = 512 << 10
)

// word is what may name a file in a script, a makefile or a manifest.
var word = regexp.MustCompile(`[A-Za-z0-9_./*?@+~-]+`)

// manifests are the files a program reads what to run from, when a
// setup script runs it: a makefile's recipes, a package's install
// scripts and build hooks.
var manifests = map[string][]string{
	"make":   {"Makefile", "makefile", "GNUmakefile"},
	"gmake":  {"Makefile", "makefile", "GNUmakefile"},
	"npm":    {"package.json", ".npmrc"},
	"npx":    {"package.json", ".npmrc"},
	"yarn":   {"package.json", ".npmrc", ".yarnrc", ".yarnrc.yml"},
	"pnpm":   {"package.json", ".npmrc", "pnpm-workspace.yaml"},
	"bun":    {"package.json", "bunfig.toml"},
	"pip":    {"setup.py", "setup.cfg", "pyproject.toml"},
	"pip3":   {"setup.py", "setup.cfg", "pyproject.toml"},
	"uv":     {"setup.py", "setup.cfg", "pyproject.toml"},
	"poetry": {"pyproject.toml", "build.py"},
	"pdm":    {"pyproject.toml"},
	"hatch":  {"pyproject.toml"},
	"pipenv": {"Pipfile"},
	"tox":    {"tox.ini", "pyproject.toml", "setup.cfg"},
	"nox":    {"noxfile.py"},
	"cargo":  {"Cargo.toml", "build.rs", ".cargo/config.toml"},
	"bundle": {"Gemfile"},
	"rake":   {"Rakefile"},
	"just":   {"justfile", ".justfile"},
	"task":   {"Taskfile.yml"},
	"go":     {"go.mod"},
	"gradle": {"build.gradle", "build.gradle.kts", "settings.gradle"},
	"mvn":    {"pom.xml"},
	"cmake":  {"CMakeLists.txt"},
	"meson":  {"meson.build"},
	"docker": {"Dockerfile"},
}

// pyModule is `python -m MODULE`: Python looks for the module in the
// working directory first (a `venv.py` there is what `python -m venv`
// runs).
var pyModule = regexp.MustCompile(`python[0-9.]*(?:\s+-[A-Za-z]+)*\s+-m\s*([A-Za-z0-9_.]+)`)

// codeExt are extensions of files a script may run or read code from:
// such a name counts even when no file has it yet (a hook the script
// runs only when it exists).
var codeExt = []string{".sh", ".bash", ".zsh", ".py", ".pth", ".js", ".mjs", ".cjs", ".ts", ".pl", ".rb", ".php", ".lua", ".mk", ".env", ".cfg", ".ini", ".toml", ".json", ".yaml", ".yml", ".txt", ".lock", ".in"}

// ScriptRoots returns what a setup script (bash) runs from the
// workspace ws, its working directory: every word of it that names a
// file of the workspace (`ci/setup.sh`, the same by the mount path,
// `--file=ci/env.sh`, a pattern such as `setup.d/*.sh`, which counts as
// every file it can match, new ones included), what running such a file
// may load (as for a server: the modules beside a script, node_modules,
// a virtual environment), the files a program the script runs reads
// what to run from (`make`: the makefile; `npm`: package.json; `pip`:
// setup.py and pyproject.toml; ...), and in turn the files named in
// each of those (a script it sources, a makefile's include, a package's
// install script), relative to the workspace or to the file's own
// directory, up to four files deep.
//
// Code that computes a file's name (`. "$(echo c2V0dXAuc2g= | base64
// -d)"`) names none: such a script runs what Keel cannot know, and a
// change that makes a script do so changes the script.
func ScriptRoots(script string, ws *tool.Workspace) []Root {
	var out roots
	scanned := map[string]bool{}
	var scan func(text []byte, dir string, depth int)
	scan = func(text []byte, dir string, depth int) {
		for _, m := range pyModule.FindAllSubmatch(text, -1) {
			mod := strings.ReplaceAll(strings.Trim(string(m[1]), "."), ".", "/")
			top, _, _ := strings.Cut(mod, "/")
			out.add(Root{File: top + ".py"})
			out.add(Root{Dir: top, Globs: pyGlobs})
		}
		for _, w := range word.FindAll(text, -1) {
			if len(out) >= maxRoots {
				return
			}
			names(ws, string(w), dir, &out)
		}
		if depth >= maxDepth {
			return
		}
		// Follow the files found so far that hold text.
		for i := 0; i < len(out) && len(out) < maxRoots; i++ {
			r := out[i]
			if r.File == "" || scanned[r.File] {
				continue
			}
			scanned[r.File] = true
			if b := readText(ws, r.File); b != nil {
				scan(b, path.Dir(r.File), depth+1)
			}
		}
	}
	scan([]byte(script), ".", 0)
	return out
}

// names adds the roots the word w of a file in dir names: a file of the
// workspace, a pattern of files, or a program's manifests.
func names(ws *tool.Workspace, w, dir string, out *roots) {
	w = strings.TrimLeft(w, "-")
	if m, ok := manifests[path.Base(w)]; ok && !strings.Contains(path.Base(w), ".") {
		for _, f := range m {
			out.add(Root{File: f})
		}
		if !strings.Contains(w, "/") {
			return
		}
	}
	if strings.HasPrefix(w, "~") || !strings.ContainsAny(w, "/.") || strings.Trim(w, "./") == "" {
		return // HOME is the sandbox's own, empty at each start
	}
	var tries []string
	if path.IsAbs(w) {
		// Also by the file's own directory: $(dirname "$0") and a name.
		tries = append(tries, w, path.Join(ws.MountPath(), dir, w))
	} else {
		tries = append(tries, path.Join(ws.MountPath(), w), path.Join(ws.MountPath(), dir, w))
	}
	for _, t := range tries {
		rel, err := ws.Rel(t)
		if err != nil || rel == "." || rel == ".git" || strings.HasPrefix(rel, ".git/") {
			continue
		}
		if strings.ContainsAny(rel, "*?[") {
			d, pat := path.Split(rel)
			d = path.Clean(d)
			if strings.ContainsAny(d, "*?[") || d == "." && (pat == "*" || pat == "*.*") {
				continue // a pattern of directories, or of the whole top
			}
			out.add(Root{Dir: d, Globs: []string{pat}})
			continue
		}
		fi, err := ws.FS().Lstat(rel)
		switch {
		case err == nil && fi.IsDir():
			// A directory a program installs or builds (pip install
			// ./lib): what it runs from there.
			for _, f := range []string{"setup.py", "setup.cfg", "pyproject.toml", "package.json", "Makefile"} {
				if fi, err := ws.FS().Lstat(path.Join(rel, f)); err == nil && !fi.IsDir() {
					out.add(Root{File: path.Join(rel, f)})
				}
			}
			return
		case err == nil:
			out.file(ws, rel)
			return
		case slices.Contains(codeExt, path.Ext(rel)) && t == tries[0]:
			// Not there yet: a hook the script runs when it exists.
			out.add(Root{File: rel})
		}
	}
}

// readText returns the start of a workspace file that holds text, nil
// for any other.
func readText(ws *tool.Workspace, rel string) []byte {
	f, err := ws.FS().Open(rel)
	if err != nil {
		return nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(f, maxScanBytes))
	if bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 {
		return nil
	}
	return b
}
