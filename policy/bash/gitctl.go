package bash

import (
	"path"
	"slices"
	"strconv"
	"strings"
)

// gitControlNames are files git reads as a repository's configuration or
// uses to find its git directory, by base name: a config, a commondir or
// gitdir file, and what makes a directory a git directory (HEAD, objects,
// refs).
var gitControlNames = set("config", "config.worktree", "commondir", "gitdir", "HEAD", "objects", "refs")

// gitControlName reports whether a path (absolute or relative, or an
// option's value) may be, or lie in, a file git reads as configuration,
// hooks or the place of a git directory: a component named .git or
// NAME.git, one of gitControlNames, or a hook (a name without a dot in
// a directory named hooks).
func gitControlName(p string) bool {
	if _, v, ok := strings.Cut(p, "="); ok && strings.HasPrefix(p, "-") {
		p = v
	}
	segs := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	for _, s := range segs {
		if strings.HasSuffix(s, ".git") {
			return true
		}
	}
	base := segs[len(segs)-1]
	if gitControlNames[base] {
		return true
	}
	return len(segs) > 1 && segs[len(segs)-2] == "hooks" && base != "" && !strings.Contains(base, ".")
}

// treeWriter reports whether a command writes files whose names its words
// do not show: an archive extracted (tar -x, unzip), a recursive copy, a
// move or a link (whose source may be a directory holding anything).
func treeWriter(name string, args []string) bool {
	switch name {
	case "mv", "ln", "rsync", "unzip", "cpio", "bsdtar", "7z", "7za", "unrar":
		return true
	case "cp":
		return slices.ContainsFunc(args, func(a string) bool {
			return shortOpt(a, 'r') || shortOpt(a, 'R') || shortOpt(a, 'a') || longOpt(a, []string{"--recursive", "--archive"})
		})
	case "tar":
		for i, a := range args {
			if a == "--" {
				break
			}
			if shortOpt(a, 'x') || longOpt(a, []string{"--extract", "--get"}) || i == 0 && !strings.HasPrefix(a, "-") && strings.Contains(a, "x") {
				return true
			}
		}
	}
	return false
}

// archiveExtract says why a command extracts an archive, writing files
// whose names its words do not show ("" when it does not), and the
// directory it extracts into as its words give it ("" for the working
// directory): tar -x, bsdtar -x, unzip (not -l, -p, -t, -v, -c, -Z,
// -z), cpio -i, 7z x, unrar x, python -m zipfile -e and python -m
// tarfile -e.
func archiveExtract(name string, args []string) (why, dir string) {
	optDir := func(opts ...string) string {
		for i, a := range args {
			for _, o := range opts {
				if a == o && i+1 < len(args) {
					return args[i+1]
				}
				if v, ok := strings.CutPrefix(a, o+"="); ok && strings.HasPrefix(o, "--") {
					return v
				}
				if v, ok := strings.CutPrefix(a, o); ok && v != "" && !strings.HasPrefix(o, "--") {
					return v
				}
			}
		}
		return ""
	}
	switch name {
	case "tar", "bsdtar":
		if !treeWriter("tar", args) || slices.ContainsFunc(args, func(a string) bool {
			return shortOpt(a, 'O') || longOpt(a, []string{"--to-stdout"})
		}) {
			return "", ""
		}
		return name + " extracts an archive, whose file names its words do not show", optDir("-C", "--directory")
	case "unzip":
		for _, a := range args {
			if a == "--" {
				break
			}
			if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsAny(a[1:], "lptvcZz") {
				return "", ""
			}
		}
		return "unzip extracts an archive, whose file names its words do not show", optDir("-d")
	case "cpio":
		if slices.ContainsFunc(args, func(a string) bool { return shortOpt(a, 'i') || longOpt(a, []string{"--extract"}) }) &&
			!slices.ContainsFunc(args, func(a string) bool { return shortOpt(a, 't') || longOpt(a, []string{"--list"}) }) {
			return "cpio extracts an archive, whose file names its words do not show", optDir("-D", "--directory")
		}
	case "7z", "7za", "7zr", "unrar":
		if len(args) > 0 && (args[0] == "x" || args[0] == "e") {
			return name + " extracts an archive, whose file names its words do not show", ""
		}
	}
	if interpreterName(name) == "python" {
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-m" && (args[i+1] == "zipfile" || args[i+1] == "tarfile") {
				rest := args[i+2:]
				for j, a := range rest {
					if a == "-e" || a == "--extract" {
						d := ""
						if j+2 < len(rest) {
							d = rest[j+2]
						}
						return "python -m " + args[i+1] + " extracts an archive, whose file names its words do not show", d
					}
				}
				return "", ""
			}
		}
	}
	return "", ""
}

// gitControlWrite says how a part of a command line may write a file git
// reads as configuration or hooks, or the place of a git directory ("" when
// it does not): a path it writes, or a word of a writing program, with
// such a name (sub/.git/config, .git/commondir, sub/.git as a gitdir file,
// a bare repository's config or HEAD), or an archive, recursive copy,
// move or link whose names its words do not show. git's own writes do
// not count (git config with a key that runs a program is already code).
func (l *locator) gitControlWrite(c *Command, f *Facts) string {
	rel := func(p string) string {
		if r, ok := strings.CutPrefix(p, l.mount+"/"); ok {
			return r
		}
		if p == l.mount {
			return "."
		}
		return p
	}
	for _, r := range c.Redirects {
		if r.Write && r.Target != "" && gitControlName(r.Target) {
			return "writes " + r.Target
		}
	}
	name := c.Name()
	if name == "git" {
		for _, w := range f.Written {
			if w != l.mount && gitControlName(rel(w)) {
				return "writes " + rel(w)
			}
		}
		return ""
	}
	for _, w := range f.Written {
		if gitControlName(rel(w)) {
			return "writes " + rel(w)
		}
	}
	if name == "" || !f.Writes && !treeWriter(name, c.Args()) {
		return ""
	}
	if treeWriter(name, c.Args()) {
		return name + " writes files whose names its words do not show"
	}
	for _, a := range c.Args() {
		if !strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
			if gitControlName(a) {
				return name + " writes beside " + a
			}
		}
	}
	return ""
}

// gitDir returns the directory a git command works from: cwd after its -C
// options ("" when unknown).
func (l *locator) gitDir(c *Command, cwd string) string {
	args := c.Args()
	lits := c.Literal[min(c.Prog+1, len(c.Literal)):]
	_, opts := gitSubcommand(args, lits)
	for _, o := range opts {
		if o[0] != "-C" {
			continue
		}
		if o[1] == "\x00" || cwd == "" {
			return ""
		}
		d, ok := l.abs(cwd, o[1])
		if !ok {
			return ""
		}
		cwd = d
	}
	return cwd
}

// gitUnchecked marks the git commands of a command line whose
// configuration and hooks Keel's git guard has not checked: git run
// outside the workspace (the guard watches only the workspace), or on a
// line that also writes a git control file or names it does not show
// (the guard checks after the command, but git reads them the moment it
// starts: sub/.git/config written, then git -C sub status). Such a git
// runs what that configuration names: code Keel cannot read. cwds are
// the directories the parts run in.
func (l *locator) gitUnchecked(parts []Part, cwds []string) {
	written := ""
	for i := range parts {
		if why := l.gitControlWrite(&parts[i].Command, &parts[i].Facts); why != "" {
			written = "part " + strconv.Itoa(i+1) + " (" + why + ")"
			break
		}
	}
	for i := range parts {
		p := &parts[i]
		if f := &p.Facts; f.Opaque == "" && !f.Code && !f.Dynamic && !f.Network {
			f.Opaque = l.homeInto(&p.Command, f, cwds[i])
		}
		if p.Command.Name() != "git" {
			continue
		}
		f := &p.Facts
		if f.Code || f.Dynamic || f.Opaque != "" || f.Sends != "" {
			continue
		}
		why := ""
		if d := l.gitDir(&p.Command, cwds[i]); d == "" || l.class(d) != locWorkspace {
			why = "git runs outside the workspace, in a repository whose configuration and hooks Keel's git guard does not check"
		} else if written != "" {
			why = "git reads its configuration and hooks, which " + written + " of the line may write before Keel's git guard checks them"
		}
		if why == "" {
			continue
		}
		if f.Network {
			f.Sends = why
		} else {
			f.Opaque = why
		}
	}
}
