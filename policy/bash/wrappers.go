package bash

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Programs that run other programs: wrappers, shells, interpreters,
// alias definitions and find -exec, as the walker of [Parse] looks
// through them.

// alias records an alias command and analyses the body of each alias it
// defines as a nested script; later uses of those names are dynamic.
func (w *walker) alias(cmd *Command, i int) {
	var bodies []string
	for k := i + 1; k < len(cmd.Words); k++ {
		if !cmd.Literal[k] {
			w.p.aliasUnknown = true
			cmd.Dynamic, cmd.Why = true, "defines an alias only known at run time: "+cmd.Words[k]
			continue
		}
		name, body, ok := strings.Cut(cmd.Words[k], "=")
		if !ok {
			continue // "alias -p", "alias ll": prints
		}
		w.p.aliases[name] = true
		bodies = append(bodies, body)
	}
	if len(bodies) == 0 || w.depth+1 > maxNesting {
		if len(bodies) > 0 {
			cmd.Dynamic, cmd.Why = true, fmt.Sprintf("scripts nested more than %d deep (bash -c, eval...) are not analysed", maxNesting)
			w.p.short = cmd.Why
		}
		w.p.record(*cmd)
		return
	}
	var bad []string
	for _, b := range bodies {
		// Parse first, so that a body that does not parse is reported on
		// the alias command itself.
		if _, err := parseBash(b); err != nil {
			bad = append(bad, b)
		}
	}
	if len(bad) > 0 {
		cmd.Dynamic, cmd.Why = true, "defines an alias whose text does not parse on its own: "+bad[0]
	}
	w.p.record(*cmd)
	for _, b := range bodies {
		_ = w.p.parse(b, with(cmd.Via, "alias"), w.depth+1, w.subst)
	}
}

// rebind records what hash -p and enable change for the rest of the
// line: hash -p FILE NAME makes NAME run FILE, enable -n NAME makes NAME
// run a program of that name instead of the builtin, enable -f FILE
// NAME loads a builtin from FILE. Later uses of the names are dynamic;
// a name only known at run time makes every later command dynamic.
func (w *walker) rebind(cmd *Command, name string, i int) {
	words := cmd.Words[i+1:]
	lits := cmd.Literal[i+1:]
	changes := name == "enable"
	for k, a := range words {
		if lits[k] && name == "hash" && strings.HasPrefix(a, "-") && strings.Contains(a, "p") {
			changes = true
		}
	}
	if !changes {
		return // hash, hash -r, hash -t NAME: looks names up
	}
	for k, a := range words {
		switch {
		case !lits[k]:
			w.p.aliasUnknown = true
		case strings.HasPrefix(a, "-"):
		default:
			w.p.aliases[a] = true
		}
	}
	if name == "enable" && len(words) == 0 {
		return // enable: lists the builtins
	}
	cmd.Dynamic, cmd.Why = true, name+" changes which program a name runs for the rest of the line"
}

// wrapper handles the wrapper command name at word i of cmd: it returns
// the index of the word the wrapper runs and true; -1 and true when it
// recorded a nested script itself; false when name is not a wrapper.
func (w *walker) wrapper(cmd *Command, name string, i int) (int, bool) {
	words := cmd.Words
	// skip skips options; valued lists options that take a separate
	// value. It stops at the first non-option word or after "--".
	skip := func(j int, valued string) int {
		for j < len(words) && cmd.Literal[j] && strings.HasPrefix(words[j], "-") && words[j] != "-" {
			if words[j] == "--" {
				return j + 1
			}
			if !strings.Contains(words[j], "=") && strings.Contains(" "+valued+" ", " "+words[j]+" ") {
				j++
			}
			j++
		}
		return j
	}
	dynamic := func(why string) (int, bool) {
		cmd.Prog, cmd.Dynamic, cmd.Why = i, true, why
		w.p.record(*cmd)
		return -1, true
	}
	switch name {
	case "env":
		j := i + 1
		for j < len(words) {
			wd := words[j]
			switch {
			case !cmd.Literal[j]:
				return j, true
			case wd == "-S" || wd == "--split-string" || strings.HasPrefix(wd, "--split-string="):
				script := strings.TrimPrefix(wd, "--split-string=")
				if script == wd {
					if j+1 >= len(words) || !cmd.Literal[j+1] {
						return dynamic("env -S with a command only known at run time")
					}
					script = words[j+1]
				}
				w.nested(cmd, script, "env -S")
				return -1, true
			case wd == "-C" || wd == "--chdir" || strings.HasPrefix(wd, "--chdir=") || strings.HasPrefix(wd, "-C") && len(wd) > 2:
				cmd.Dynamic, cmd.Why = true, "env "+wd+" runs the command in another directory"
				if !strings.Contains(wd, "=") && len(wd) <= 2 || wd == "--chdir" {
					j++
				}
				j++
			case wd == "-u" || wd == "--unset":
				j += 2
			case wd == "--":
				return j + 1, true
			case strings.HasPrefix(wd, "-"):
				j++
			case strings.Contains(wd, "=") && !strings.HasPrefix(wd, "="):
				k, _, _ := strings.Cut(wd, "=")
				cmd.Assigns = append(cmd.Assigns, k)
				j++
			default:
				return j, true
			}
		}
		return j, true
	case "timeout":
		j := skip(i+1, "-s --signal -k --kill-after")
		return j + 1, true // the duration
	case "nice":
		return skip(i+1, "-n --adjustment"), true
	case "ionice":
		return skip(i+1, "-c --class -n --classdata -p --pid -P --pgid -u --uid"), true
	case "stdbuf":
		return skip(i+1, "-i -o -e --input --output --error"), true
	case "nohup", "setsid", "builtin", "time", "unbuffer", "fakeroot", "catchsegv", "dbus-run-session":
		return skip(i+1, "-f --format -o --output"), true
	case "strace", "ltrace":
		return skip(i+1, "-o -e -p -s -u -E -a -I -X -P -b -O -S"), true
	case "valgrind":
		return skip(i+1, ""), true
	case "xvfb-run":
		return skip(i+1, "-n --server-num -s --server-args -f --auth-file -e --error-file -p --xauth-protocol"), true
	case "taskset":
		j := skip(i+1, "")
		return j + 1, true // the mask
	case "chrt":
		j := skip(i+1, "-T --sched-runtime -P --sched-period -D --sched-deadline")
		return j + 1, true // the priority
	case "flock":
		j := skip(i+1, "-w --wait --timeout -E --conflict-exit-code")
		j++ // the lock file or descriptor
		for k := j; k+1 < len(words); k++ {
			if words[k] == "-c" || words[k] == "--command" {
				if !cmd.Literal[k+1] {
					return dynamic("flock -c with a command only known at run time")
				}
				w.nested(cmd, words[k+1], "flock -c")
				return -1, true
			}
		}
		return skip(j, ""), true
	case "chroot", "nsenter", "unshare", "proot", "firejail", "runuser", "setpriv":
		return dynamic(name + " runs its command in another root, namespace or identity")
	case "command":
		j := skip(i+1, "")
		for _, wd := range words[i+1 : j] {
			if wd == "-v" || wd == "-V" {
				return 0, false // only looks the name up
			}
		}
		return j, true
	case "exec":
		return skip(i+1, "-a"), true
	case "sudo":
		for j := i + 1; j < len(words) && strings.HasPrefix(words[j], "-"); j++ {
			if words[j] == "-D" || words[j] == "--chdir" || strings.HasPrefix(words[j], "--chdir=") {
				cmd.Dynamic, cmd.Why = true, "sudo "+words[j]+" runs the command in another directory"
			}
		}
		return skip(i+1, "-u --user -g --group -C --close-from -D --chdir -h --host -p --prompt -r --role -t --type -U --other-user -T --command-timeout"), true
	case "doas":
		return skip(i+1, "-u -C"), true
	case "xargs":
		return skip(i+1, "-I -i -n --max-args -P --max-procs -L --max-lines -d --delimiter -E -e -s --max-chars -a --arg-file"), true
	case "parallel":
		return skip(i+1, "-j --jobs -I -n -N -d --delimiter -a --arg-file -S --sshlogin --joblog --results --tmpdir --timeout --delay -P"), true
	case "eval":
		rest := words[i+1:]
		for k := range rest {
			if !cmd.Literal[i+1+k] {
				return dynamic("eval of a string only known at run time")
			}
		}
		w.nested(cmd, strings.Join(rest, " "), "eval")
		return -1, true
	case "trap":
		j := skip(i+1, "")
		if j < len(words) && len(words)-j >= 2 {
			if !cmd.Literal[j] {
				return dynamic("trap of a command only known at run time")
			}
			w.nested(cmd, words[j], "trap")
			return -1, true
		}
		return 0, false
	case "watch":
		j := skip(i+1, "-n --interval -d --differences -q --equexit")
		if j < len(words) {
			for k := j; k < len(words); k++ {
				if !cmd.Literal[k] {
					return dynamic("watch of a command only known at run time")
				}
			}
			w.nested(cmd, strings.Join(words[j:], " "), "watch")
			return -1, true
		}
		return 0, false
	case "su":
		for j := i + 1; j+1 < len(words); j++ {
			if words[j] == "-c" || words[j] == "--command" {
				if !cmd.Literal[j+1] {
					return dynamic("su -c with a command only known at run time")
				}
				w.nested(cmd, words[j+1], "su -c")
				return -1, true
			}
		}
		return 0, false
	}
	return 0, false
}

func isShell(name string) bool {
	switch name {
	case "bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "rbash", "yash", "posh", "fish", "tcsh", "csh":
		return true
	}
	return false
}

// shell handles a shell at word i: "bash -c SCRIPT" and a shell reading
// its script from standard input are recorded as their nested commands
// (true); a shell running a script file is an ordinary command that runs
// code (false).
func (w *walker) shell(cmd *Command, i int, stdin *syntax.Redirect) bool {
	words := cmd.Words
	j := i + 1
	if path.Base(words[i]) == "busybox" {
		if j >= len(words) || !isShell(words[j]) {
			return false
		}
		j++
	}
	hasC, fromStdin := false, false
	for j < len(words) && cmd.Literal[j] && (strings.HasPrefix(words[j], "-") || strings.HasPrefix(words[j], "+")) {
		wd := words[j]
		if wd == "--" || wd == "-" {
			j++
			break
		}
		if wd == "-o" || wd == "+o" || wd == "-O" || wd == "+O" || wd == "--rcfile" || wd == "--init-file" {
			j += 2
			continue
		}
		if wd == "--version" || wd == "--help" {
			return false
		}
		if !strings.HasPrefix(wd, "--") {
			hasC = hasC || strings.Contains(wd[1:], "c")
			fromStdin = fromStdin || strings.Contains(wd[1:], "s")
		}
		j++
	}
	name := path.Base(words[i])
	switch {
	case hasC:
		if j >= len(words) {
			return false // "bash -c" with no script: an error in bash
		}
		if !cmd.Literal[j] {
			cmd.Dynamic, cmd.Why = true, name+" -c with a script only known at run time: "+words[j]
			return false
		}
		w.nested(cmd, words[j], name+" -c")
		return true
	case j < len(words) && !fromStdin:
		cmd.Code, cmd.CodeWhy = true, name+" runs the script file "+words[j]
		return false
	}
	// The script comes from standard input.
	if stdin != nil && (stdin.Op == syntax.Hdoc || stdin.Op == syntax.DashHdoc || stdin.Op == syntax.WordHdoc) {
		var body string
		lit := true
		if stdin.Op == syntax.WordHdoc {
			body, lit = w.wordValue(stdin.Word)
		} else if stdin.Hdoc != nil {
			body, lit = w.wordValue(stdin.Hdoc)
			if !lit {
				// An unquoted here-document with expansions: bash expands
				// them first; what runs is only known at run time.
				body = w.text(stdin.Hdoc.Pos(), stdin.Hdoc.End())
			}
		}
		if lit {
			w.nested(cmd, body, name+" <<")
			return true
		}
	}
	w.fromInput(cmd, name+" runs a script read from its standard input")
	return false
}

// interpreters are the programs that run code given as a file, a string
// or their standard input, with the options that take the code as their
// value and those that only print something and run nothing.
var interpreters = map[string]struct{ code, info []string }{
	"python":    {[]string{"-c", "-m"}, []string{"-V", "--version", "-h", "--help"}},
	"pypy":      {[]string{"-c", "-m"}, []string{"-V", "--version", "-h", "--help"}},
	"perl":      {[]string{"-e", "-E"}, []string{"-v", "--version", "-h", "--help", "-V"}},
	"ruby":      {[]string{"-e"}, []string{"-v", "--version", "-h", "--help"}},
	"node":      {[]string{"-e", "--eval", "-p", "--print"}, []string{"-v", "--version", "-h", "--help"}},
	"deno":      {[]string{"eval", "run"}, []string{"-V", "--version", "-h", "--help"}},
	"php":       {[]string{"-r"}, []string{"-v", "--version", "-h", "--help"}},
	"lua":       {[]string{"-e"}, []string{"-v"}},
	"luajit":    {[]string{"-e"}, []string{"-v"}},
	"Rscript":   {[]string{"-e"}, []string{"--version"}},
	"tclsh":     {nil, nil},
	"osascript": {[]string{"-e"}, nil},
}

// interpreterName maps program names such as python3.11 to their entry in
// interpreters.
func interpreterName(name string) string {
	switch {
	case strings.HasPrefix(name, "python"), strings.HasPrefix(name, "pypy"):
		rest := strings.TrimLeft(strings.TrimPrefix(strings.TrimPrefix(name, "python"), "pypy"), "0123456789.")
		if rest == "" {
			if strings.HasPrefix(name, "pypy") {
				return "pypy"
			}
			return "python"
		}
	case name == "nodejs":
		return "node"
	case strings.HasPrefix(name, "perl"), strings.HasPrefix(name, "ruby"), strings.HasPrefix(name, "php"), strings.HasPrefix(name, "lua"):
		for _, base := range []string{"perl", "ruby", "php", "luajit", "lua"} {
			if strings.HasPrefix(name, base) && strings.Trim(strings.TrimPrefix(name, base), "0123456789.") == "" {
				return base
			}
		}
	}
	if _, ok := interpreters[name]; ok {
		return name
	}
	return ""
}

// interpreter marks an interpreter at word i as running code (a script
// file, a code string, a module), or, when it reads its program from
// standard input, as dynamic.
func (w *walker) interpreter(cmd *Command, i int, stdin *syntax.Redirect) {
	name := path.Base(cmd.Words[i])
	key := interpreterName(name)
	if key == "" {
		return
	}
	spec := interpreters[key]
	args := cmd.Words[i+1:]
	if len(args) > 0 {
		info := true
		for _, a := range args {
			if !contains(spec.info, a) {
				info = false
			}
		}
		if info {
			return // --version
		}
	}
	for k, a := range args {
		lit := cmd.Literal[i+1+k]
		switch {
		case lit && contains(spec.code, a):
			what := "code given on its command line"
			if a == "-m" && k+1 < len(args) {
				what = "the module " + args[k+1]
			}
			cmd.Code, cmd.CodeWhy = true, name+" runs "+what
			return
		case lit && len(a) > 2 && a[0] == '-' && a[1] != '-' && contains(spec.code, a[:2]):
			cmd.Code, cmd.CodeWhy = true, name+" runs code given on its command line"
			return
		case lit && a == "-":
		case lit && strings.HasPrefix(a, "-"):
			continue
		default:
			cmd.Code, cmd.CodeWhy = true, name+" runs the script "+a
			return
		}
		break
	}
	// No script: the program is read from standard input.
	cmd.Code, cmd.CodeWhy = true, name+" runs a program read from its standard input"
	if stdin == nil && w.pipe != nil {
		w.fromInput(cmd, name+" runs a program read from its standard input")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// nested records the commands of script, run by cmd, or cmd as dynamic if
// the script is too deep or does not parse.
func (w *walker) nested(cmd *Command, script, how string) {
	via := with(cmd.Via, how)
	if w.depth+1 > maxNesting {
		cmd.Dynamic, cmd.Why = true, fmt.Sprintf("scripts nested more than %d deep (bash -c, eval...) are not analysed", maxNesting)
		w.p.short = cmd.Why
		w.p.record(*cmd)
		return
	}
	if err := w.p.parse(script, via, w.depth+1, w.subst); err != nil {
		cmd.Dynamic, cmd.Why = true, fmt.Sprintf("%s script does not parse: %v", how, err)
		w.p.record(*cmd)
	}
}

// findExec records the commands of find's -exec, -execdir, -ok and
// -okdir actions, each up to its ";" or "+". In them, "{}" stands for
// the files found, so it is replaced by find's starting points (what the
// found files lie under) for the analysis. Each has the whole find command
// as its text, so that a remembered approval covers only that exact find;
// one that is not a read-only program is dynamic (which files it changes
// is only known at run time), and so is every -execdir command (it runs
// in each found file's directory).
func (w *walker) findExec(cmd *Command, i int) {
	words := cmd.Words
	var starts []string
	var startLit []bool
	var startGlob []int
	for j := i + 1; j < len(words) && !strings.HasPrefix(words[j], "-") && words[j] != "(" && words[j] != "!"; j++ {
		starts = append(starts, words[j])
		startLit = append(startLit, cmd.Literal[j])
		startGlob = append(startGlob, cmd.Glob[j])
	}
	if len(starts) == 0 {
		starts, startLit, startGlob = []string{"."}, []bool{true}, []int{-1}
	}
	for j := i + 1; j < len(words); j++ {
		switch words[j] {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		k := j + 1
		for k < len(words) && words[k] != ";" && words[k] != "+" {
			k++
		}
		if k > j+1 {
			sub := Command{
				Text:      cmd.Text,
				Via:       with(cmd.Via, "find "+words[j]),
				Redirects: cmd.Redirects,
				Input:     true,
			}
			for m := j + 1; m < k; m++ {
				if words[m] == "{}" && cmd.Literal[m] {
					sub.Words = append(sub.Words, starts...)
					sub.Literal = append(sub.Literal, startLit...)
					sub.Glob = append(sub.Glob, startGlob...)
					continue
				}
				sub.Words = append(sub.Words, words[m])
				sub.Literal = append(sub.Literal, cmd.Literal[m])
				sub.Glob = append(sub.Glob, cmd.Glob[m])
			}
			prog := path.Base(sub.Words[0])
			switch {
			case words[j] == "-execdir" || words[j] == "-okdir":
				sub.Dynamic, sub.Why = true, "find "+words[j]+" runs "+prog+" in the directory of each file found"
			case !readOnly[prog] || prog == "find":
				sub.Dynamic, sub.Why = true, "find "+words[j]+" runs "+prog+" on the files found at run time"
			}
			w.unwrap(sub, 0, nil)
		}
		j = k
	}
}
