// Package bash analyses a bash command line for the policy engine
// (package policy): it splits the line into every simple command it
// would run ([Parse]), looking through pipelines, lists, substitutions,
// nested scripts and wrappers, and derives each command's [Facts] from
// its text ([Analyse]): the paths it reads and writes and where they lie
// (the workspace, the sandbox's scratch space, the read-only system
// directories, or outside), the hosts it reaches, whether it is
// destructive, and what only run time can tell (Dynamic) or what code it
// runs unseen (Code). [WritesBeyond] says whether words after a
// remembered prefix make a program write files.
//
// The analysis reads nothing but its arguments, with one exception: when
// commands run without a sandbox ([Env].Host set), a path under the
// workspace is resolved on the host file system (symbolic links
// followed, read-only), because there a link in the workspace leads the
// command wherever it points.
package bash

import (
	"path"
	"slices"
	"strings"

	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/internal/realpath"
)

// Env is where a command line runs.
type Env struct {
	// Mount is the workspace's path as the commands see it (absolute).
	Mount string
	// Scratch are the directories private to the sandbox that a command
	// may write without reaching anything else (/tmp, HOME, /dev/null...);
	// System the read-only system directories (/usr, /lib...). A path
	// under neither nor under Mount is outside.
	Scratch, System []string
	// Host is the workspace's host directory when commands run without a
	// sandbox, "" in a sandbox: a path word under Mount is then also
	// resolved on the host file system, so that a symbolic link in the
	// workspace cannot lead a command outside it unseen.
	Host string
}

// Part is one simple command of a command line with what the analysis
// found of it.
type Part struct {
	Command Command
	Facts   Facts
	// ReadOnly is set when the program is one that changes nothing by
	// itself (ls, cat, grep, find...).
	ReadOnly bool
}

// homeAssigned matches an assignment to HOME anywhere in a command line.
var homeAssigned = lazy.Regexp(`(^|[^A-Za-z0-9_])HOME\+?=`)

// Analyse parses line as [Parse] does, keeping at most limit simple
// commands (0: all), and derives the facts of each in env. The
// directory a command runs in follows the cd, pushd and popd commands
// before it (unknown when their target is). It returns how many
// commands beyond limit it left out, and why it left some of a command
// unanalysed ("" when it did not: nesting too deep), or the parser's
// error when the line is not bash.
func Analyse(line string, env Env, limit int) (parts []Part, omitted int, short string, err error) {
	cmds, total, short, err := parseLimit(line, limit)
	if err != nil {
		return nil, 0, "", err
	}
	loc := &locator{mount: path.Clean(env.Mount), scratch: env.Scratch, system: env.System}
	if env.Host != "" {
		loc.host = realpath.Resolve(path.Clean(env.Host))
	}
	loc.homeSet = homeAssigned().MatchString(line)
	cdpath := strings.Contains(line, "CDPATH")
	cwd := loc.mount
	exports := ""
	parts = make([]Part, len(cmds))
	cwds := make([]string, len(cmds))
	for i := range cmds {
		cmd := &cmds[i]
		cwds[i] = cwd
		f := loc.analyse(cmd, cwd)
		if exports != "" && f.Network && f.Sends == "" {
			// LD_PRELOAD, WGETRC, CURL_HOME... for the rest of the line.
			f.Sends = "an earlier command of the line (" + exports + ") sets variables the network program reads"
		}
		f.Opaque = opaque(cmd, f, exports)
		switch n := cmd.Name(); {
		case n == "export" || n == "declare" || n == "typeset" || n == "readonly":
			exports = n
		case n == "set" && slices.ContainsFunc(cmd.Args(), func(a string) bool { return a == "allexport" || strings.HasPrefix(a, "-") && strings.Contains(a, "a") }):
			exports = "set -a"
		}
		if n := cmd.Name(); n == "cd" || n == "pushd" {
			if d, ok := loc.cd(cmd, cwd, cdpath); ok {
				cwd = d
			} else {
				cwd = ""
				f.Dyn("changes to a directory only known at run time")
			}
		} else if n == "popd" {
			cwd = ""
		}
		parts[i] = Part{Command: *cmd, Facts: *f, ReadOnly: readOnly[cmd.Name()]}
	}
	loc.gitUnchecked(parts, cwds)
	return parts, total - len(cmds), short, nil
}

// Subcommand returns the command's subcommand: its first literal
// argument that is not an option, or for git the first word after git's
// global options when it is a literal; "" when there is none.
func (c *Command) Subcommand() string {
	if c.Prog >= len(c.Words) {
		return ""
	}
	args, lits := c.Args(), c.Literal[c.Prog+1:]
	if c.Name() == "git" {
		if i, _ := gitSubcommand(args, lits); i < len(args) && lits[i] {
			return args[i]
		}
		return ""
	}
	return firstPositional(args, lits)
}
