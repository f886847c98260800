package bash

import (
	"slices"
	"strings"
)

// writeOptions: options whose value is a file or directory the program
// writes.
var writeOptions = map[string][]string{
	"sort":    {"-o", "--output"},
	"curl":    {"-o", "--output", "--output-dir", "-c", "--cookie-jar", "-D", "--dump-header", "--trace", "--trace-ascii"},
	"wget":    {"-O", "--output-document", "-P", "--directory-prefix", "-o", "--output-file", "-a", "--append-output"},
	"gcc":     {"-o"},
	"g++":     {"-o"},
	"cc":      {"-o"},
	"c++":     {"-o"},
	"clang":   {"-o"},
	"clang++": {"-o"},
	"go":      {"-o"},
	"cp":      {"-t", "--target-directory"},
	"mv":      {"-t", "--target-directory"},
	"ln":      {"-t", "--target-directory"},
	"install": {"-t", "--target-directory"},
	"unzip":   {"-d"},
	"tar":     {"-C", "--directory"},
	"openssl": {"-out"},
	"git":     {"--output", "-o"},
	"find":    {"-fprint", "-fprint0", "-fprintf", "-fls"},
	"iconv":   {"-o", "--output"},
	"patch":   {"-o", "--output"},
	"csplit":  {"-f", "--prefix"},
	"jq":      {},
	"xxd":     {},
	"shuf":    {"-o", "--output"},
}

// secondWrites: programs whose second positional argument is a file they
// write ("uniq in out").
var secondWrites = set("uniq", "xxd", "split")

// statOnly: programs that only test or transform their arguments as
// strings; an argument only known at run time does not make them
// dynamic.
var statOnly = set("test", "[", "basename", "dirname")

// analyse derives the facts of one command; cwd is the directory the
// command runs in ("" when unknown).
func (l *locator) analyse(c *Command, cwd string) *Facts {
	f := &Facts{Dynamic: c.Dynamic, Why: c.Why, Code: c.Code}
	if c.Code && f.Why == "" {
		f.Why = c.CodeWhy
	}
	for _, r := range c.Redirects {
		switch {
		case r.Target == "":
		case !r.Literal && r.Write:
			f.Writes = true
			f.Dyn("writes to a file only known at run time: " + r.Target)
			f.Unresolved = appendNew(f.Unresolved, r.Target)
		case !r.Literal:
			f.Dyn("reads a file only known at run time: " + r.Target)
		default:
			if r.Pattern && r.Write {
				f.Unresolved = appendNew(f.Unresolved, r.Target)
			}
			l.note(f, cwd, r.Target, r.Write)
		}
	}
	name := c.Name()
	if name == "" {
		return f
	}
	if why := namesHidden(c); why != "" {
		f.Dyn(why)
	}
	args := c.Args()
	lits := c.Literal[min(c.Prog+1, len(c.Literal)):]
	globs := c.Glob[min(c.Prog+1, len(c.Glob)):]
	if why := l.projectCode(c, name, args, lits, cwd); why != "" && !f.Code {
		f.Code = true
		if f.Why == "" {
			f.Why = why
		}
	}
	if why, dir := archiveExtract(name, args); why != "" {
		// The archive may hold any file, one that runs on its own or
		// instructions included (it may come from the untrusted input).
		d := cwd
		if dir != "" {
			d, _ = l.abs(cwd, dir)
		}
		if d == "" || under(d, l.mount) || under(l.mount, d) {
			f.AnyFile = why
		}
	}
	// Network.
	if netAlways[name] {
		f.Network = true
	}
	sub := c.Subcommand()
	if subs, ok := netSub[name]; ok && sub != "" && slices.Contains(subs, sub) && !slices.Contains(args, "--no-index") && !slices.Contains(args, "--offline") {
		f.Network = true
	}
	if interpreterName(name) == "python" && len(args) >= 3 && args[0] == "-m" && (args[1] == "pip" || args[1] == "ensurepip") {
		if slices.Contains([]string{"install", "download", "wheel"}, args[2]) && !slices.Contains(args, "--no-index") {
			f.Network = true
		}
	}
	for i, a := range args {
		if !lits[i] {
			continue
		}
		v := a
		if strings.HasPrefix(a, "-") {
			_, v, _ = strings.Cut(a, "=")
		}
		if h := hostOf(v); h != "" {
			f.Hosts = appendNew(f.Hosts, h)
			f.Network = true
		}
	}
	if name == "ssh" || name == "mosh" {
		if h := firstPositional(args, lits); h != "" {
			if _, host, ok := strings.Cut(h, "@"); ok {
				h = host
			}
			f.Hosts = appendNew(f.Hosts, strings.ToLower(h))
		}
	}
	if f.Network {
		f.Sends = sends(c, name, args)
	}
	// Destructive forms.
	switch name {
	case "rm":
		for _, a := range args {
			if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsAny(a, "rRf") || a == "--recursive" || a == "--force" {
				f.Destructive = true
			}
		}
	case "dd", "shred", "mkfs", "mkfs.ext4", "mkfs.vfat", "wipefs", "fdisk", "parted":
		f.Destructive = true
	case "chmod", "chown", "chgrp":
		f.Destructive = slices.Contains(args, "-R") || slices.Contains(args, "--recursive")
	case "git":
		l.git(f, args, lits, globs, cwd)
		return f
	}
	if noPaths[name] {
		return f
	}
	// Programs whose first argument is code or a script.
	inPlace := false
	switch name {
	case "sed":
		inPlace = hasInPlace(args)
		sedFacts(f, args, lits)
	case "perl", "ruby":
		inPlace = hasInPlace(args)
	case "awk", "gawk", "mawk", "nawk", "busybox-awk":
		inPlace = awkFacts(f, name, args, lits)
	}
	// Paths.
	skipFirst := false
	if alts, ok := patternFirst[name]; ok {
		skipFirst = true
		for _, a := range args {
			for _, alt := range alts {
				if a == alt || strings.HasPrefix(a, alt+"=") {
					skipFirst = false
				}
			}
		}
	}
	valueOpts := valueOptions[name]
	writeOpts := writeOptions[name]
	type pathArg struct {
		word string
		glob int
		dyn  bool // only known at run time
	}
	var positional []pathArg
	dynWrite := false
	// written notes path as written by the option word; a word that is
	// not a literal writes a file only known at run time.
	written := func(lit bool, word, path string) {
		if !lit {
			f.Writes = true
			f.Dyn("writes to a file only known at run time: " + word)
			f.Unresolved = appendNew(f.Unresolved, word)
			return
		}
		l.note(f, cwd, path, true)
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" && lits[i] {
			continue
		}
		if name == "dd" {
			if k, v, ok := strings.Cut(a, "="); ok && (k == "if" || k == "of") {
				if !lits[i] {
					f.Dyn("dd " + k + "= names a file only known at run time")
					f.Writes = f.Writes || k == "of"
					if k == "of" {
						f.Unresolved = appendNew(f.Unresolved, a)
					}
					continue
				}
				l.note(f, cwd, v, k == "of")
			}
			continue
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			k, v, hasValue := strings.Cut(a, "=")
			switch {
			case hasValue && slices.Contains(writeOpts, k):
				written(lits[i], a, v)
			case hasValue && !lits[i] && !slices.Contains(valueOpts, k):
				f.Dyn("an option value only known at run time: " + a)
			case hasValue && !slices.Contains(valueOpts, k) && looksLikePath(v):
				l.note(f, cwd, v, inPlace)
			case !hasValue && slices.Contains(writeOpts, a) && i+1 < len(args):
				i++
				written(lits[i], args[i], args[i])
			case !hasValue && slices.Contains(valueOpts, a):
				i++
			case !hasValue && i+1 < len(args) && len(a) > 2 && a[1] != '-' && letters(a[1:]) && slices.Contains(writeOpts, "-"+a[len(a)-1:]):
				// A cluster ending in a short write option: ln -st DIR.
				i++
				written(lits[i], args[i], args[i])
			case attachedWrite(a, writeOpts) != "":
				// A value attached to a short option: sort -o/root/.gitconfig.
				written(lits[i], a, attachedWrite(a, writeOpts))
			}
			continue
		}
		if lits[i] && (hostOf(a) != "" || strings.Contains(a, "://")) {
			continue
		}
		if skipFirst {
			skipFirst = false
			continue
		}
		if !lits[i] {
			if !statOnly[name] {
				f.Dyn("an argument only known at run time: " + a)
				dynWrite = true
				positional = append(positional, pathArg{a, -1, true})
			}
			continue
		}
		positional = append(positional, pathArg{a, globs[i], false})
	}
	writesAll := writeAll[name] || inPlace || name == "mv"
	if dynWrite && (writesAll || writeLast[name]) {
		f.Writes = true
	}
	for i, a := range positional {
		write := false
		switch {
		case writesAll:
			write = true
		case writeLast[name]:
			write = i == len(positional)-1 && len(positional) > 1
		case secondWrites[name]:
			write = i == 1
		case name == "find":
			write = slices.Contains(args, "-delete")
		}
		if a.dyn {
			if write {
				f.Unresolved = appendNew(f.Unresolved, a.word)
			}
			continue
		}
		l.noteWord(f, cwd, a.word, a.glob, write)
	}
	if writesAll || writeLast[name] {
		f.Writes = true
	}
	return f
}

// attachedWrite returns the value attached to one of the short write
// options opts in the word a (-o/tmp/out gives /tmp/out), "" when a is
// not one.
func attachedWrite(a string, opts []string) string {
	if len(a) <= 2 || a[1] == '-' {
		return ""
	}
	for _, o := range opts {
		if len(o) == 2 && strings.HasPrefix(a, o) {
			return a[2:]
		}
	}
	return ""
}

// hasInPlace reports whether a sed, perl or ruby command edits files in
// place: -i (with or without a suffix, also inside a cluster such as
// -pi or -ni) or --in-place.
func hasInPlace(args []string) bool {
	for _, a := range args {
		switch {
		case a == "--":
			return false
		case strings.HasPrefix(a, "--in-place"):
			return true
		case strings.HasPrefix(a, "--"):
		case strings.HasPrefix(a, "-") && len(a) > 1:
			// A cluster: -i, -i.bak, -pi, -ni, -Ei, -0777pi.
			for _, r := range a[1:] {
				if r == 'i' {
					return true
				}
				if r == 'e' || r == 'E' || r == 'f' {
					break // the rest is the option's value
				}
			}
		}
	}
	return false
}

// sedFacts notes what a sed script does besides editing text: the e
// command and the s///e flag run shell commands; w, W and s///w write a
// file the script names; r and R read one. A script only known at run
// time is dynamic.
func sedFacts(f *Facts, args []string, lits []bool) {
	var scripts []string
	fromOption := false
	script := func(i int, text string) {
		fromOption = true
		if !lits[i] {
			f.Dyn("a sed script only known at run time: " + text)
		}
		scripts = append(scripts, text)
	}
	fromFile := func() {
		fromOption = true
		f.Code = true
		if f.Why == "" {
			f.Why = "sed runs a script file"
		}
	}
	// GNU sed takes abbreviated long options (--expr=) and clusters of
	// short ones whose last takes the rest of the word or the next one
	// as its value (-ne, -n -e'1e x.sh', -i.bak). Without -e or -f, the
	// first word that is neither an option nor its value is the script.
	first := -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		_, v, hasValue := strings.Cut(a, "=")
		switch {
		case !strings.HasPrefix(a, "-") || a == "-" || !lits[i]:
			if first < 0 {
				first = i
			}
		case a == "--":
			if first < 0 && i+1 < len(args) {
				first = i + 1
			}
			i = len(args)
		case longOpt(a, []string{"--expression"}):
			if hasValue {
				script(i, v)
			} else if i+1 < len(args) {
				script(i+1, args[i+1])
				i++
			}
		case longOpt(a, []string{"--file"}):
			fromFile()
			if !hasValue {
				i++
			}
		case longOpt(a, []string{"--line-length"}) && !hasValue:
			i++
		case len(a) > 1 && a[0] == '-' && a[1] != '-':
		cluster:
			for j := 1; j < len(a); j++ {
				switch a[j] {
				case 'e', 'f', 'l':
					val, vi := a[j+1:], i
					if val == "" && i+1 < len(args) {
						i++
						val, vi = args[i], i
					}
					switch a[j] {
					case 'e':
						script(vi, val)
					case 'f':
						fromFile()
					}
					break cluster
				case 'i':
					break cluster // -i.bak: the rest is a suffix
				}
			}
		}
	}
	if !fromOption && first >= 0 {
		script(first, args[first])
	}
	for _, s := range scripts {
		exec, write, read := sedCommands(s)
		if exec {
			f.Code = true
			f.Dyn("the sed script runs shell commands (e)")
		}
		if write {
			f.Writes = true
			f.Dyn("the sed script writes a file it names (w)")
		}
		if read {
			f.Dyn("the sed script reads a file it names (r)")
		}
	}
}

// sedCommands scans a sed script for the commands that run, write or read
// something else than the text: e, s///e; w, W, s///w; r, R. It errs on
// the side of finding them.
func sedCommands(s string) (exec, write, read bool) {
	skip := func(i int, delim byte) int {
		for i < len(s) {
			switch s[i] {
			case '\\':
				i += 2
				continue
			case delim:
				return i + 1
			}
			i++
		}
		return i
	}
	toEOL := func(i int) int {
		for i < len(s) && s[i] != '\n' {
			i++
		}
		return i
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case strings.IndexByte(" \t\n;{}!0123456789$,~+", c) >= 0:
			i++
		case c == '/':
			i = skip(i+1, '/')
			for i < len(s) && (s[i] == 'I' || s[i] == 'M') {
				i++
			}
		case c == '\\' && i+1 < len(s):
			i = skip(i+2, s[i+1])
		case c == 's' || c == 'y':
			if i+1 >= len(s) {
				return
			}
			d := s[i+1]
			j := skip(i+2, d)
			j = skip(j, d)
			if c == 's' {
				for j < len(s) && strings.IndexByte(";\n}", s[j]) < 0 {
					switch s[j] {
					case 'e':
						exec = true
					case 'w', 'W':
						write = true
						j = toEOL(j)
						continue
					}
					j++
				}
			}
			i = j
		case c == 'e':
			exec = true
			i = toEOL(i)
		case c == 'w' || c == 'W':
			write = true
			i = toEOL(i)
		case c == 'r' || c == 'R':
			read = true
			i = toEOL(i)
		case c == 'a' || c == 'i' || c == 'c':
			i = toEOL(i)
		case c == 'b' || c == 't' || c == 'T' || c == ':':
			for i < len(s) && strings.IndexByte(";\n", s[i]) < 0 {
				i++
			}
		default:
			i++
		}
	}
	return
}

// awkFacts notes what an awk program does besides reading: output
// redirections (print > "f", print | "cmd"), system() and command
// pipes into getline run commands or write files. A program only known at
// run time, or read from a file (-f), is code the analysis cannot see.
// It returns whether the command edits its files in place (gawk -i
// inplace).
func awkFacts(f *Facts, name string, args []string, lits []bool) bool {
	inPlace := false
	var progs []string
	fromFile, fromOption := false, false
	// value returns the value of the option at args[i] (the rest of the
	// word after skip bytes, or the next word) and the index of the last
	// word it used.
	value := func(i, skip int) (string, int) {
		if rest := args[i][skip:]; rest != "" {
			return strings.TrimPrefix(rest, "="), i
		}
		if i+1 < len(args) {
			return args[i+1], i + 1
		}
		return "", i
	}
	// include: -i FILE loads awk code from FILE; -i inplace is gawk's
	// in-place editing.
	include := func(v string) {
		if strings.HasPrefix(v, "inplace") {
			inPlace = true
		} else {
			fromFile = true
		}
	}
	// gawk takes abbreviated long options (--sour=) and clusters of
	// short ones (-ve, -f, -E, -i, -l, -W exec load or run code).
	for i := 0; i < len(args); i++ {
		a := args[i]
		k, _, _ := strings.Cut(a, "=")
		switch {
		case a == "--":
			if !fromFile && !fromOption && i+1 < len(args) {
				if !lits[i+1] {
					f.Code = true
					f.Dyn("an " + name + " program only known at run time: " + args[i+1])
				}
				progs = append(progs, args[i+1])
			}
			i = len(args)
		case longOpt(a, []string{"--file", "--exec", "--load"}):
			fromFile = true
			_, i = value(i, len(k))
		case longOpt(a, []string{"--include"}):
			var v string
			v, i = value(i, len(k))
			include(v)
		case longOpt(a, []string{"--source"}):
			var v string
			v, i = value(i, len(k))
			fromOption = true
			progs = append(progs, v)
		case longOpt(a, []string{"--assign", "--field-separator"}) && !strings.Contains(a, "="):
			i++
		case strings.HasPrefix(a, "--"):
		case len(a) > 1 && a[0] == '-':
		cluster:
			for j := 1; j < len(a); j++ {
				switch a[j] {
				case 'f', 'E', 'l':
					fromFile = true
					_, i = value(i, j+1)
					break cluster
				case 'i':
					var v string
					v, i = value(i, j+1)
					include(v)
					break cluster
				case 'e':
					var v string
					v, i = value(i, j+1)
					fromOption = true
					progs = append(progs, v)
					break cluster
				case 'W':
					var v string
					v, i = value(i, j+1)
					if strings.HasPrefix(v, "e") {
						fromFile = true // mawk -W exec FILE
					}
					break cluster
				case 'v', 'F':
					_, i = value(i, j+1)
					break cluster
				}
			}
		default:
			if !fromFile && !fromOption && len(progs) == 0 {
				if !lits[i] {
					f.Code = true
					f.Dyn("an " + name + " program only known at run time: " + a)
				}
				progs = append(progs, a)
			}
		}
		if len(progs) > 0 && !fromOption {
			break
		}
	}
	prog := strings.Join(progs, "\n")
	if fromFile {
		f.Code = true
		if f.Why == "" {
			f.Why = name + " runs a program file"
		}
		return inPlace
	}
	if strings.Contains(prog, "system") || strings.Contains(prog, "|") || strings.Contains(prog, ">") || strings.Contains(prog, "getline") {
		f.Code, f.Writes = true, true
		f.Dyn("the " + name + " program can write files or run commands (print >, |, system, getline)")
	}
	return inPlace
}

// gitValued are git's global options that take a separate value.
var gitValued = set("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env", "--super-prefix", "--attr-source", "--list-cmds")

// gitSubcommand returns the index in args of git's subcommand (after the
// global options), or len(args), and the global options with their
// values.
func gitSubcommand(args []string, lits []bool) (int, [][2]string) {
	var opts [][2]string
	i := 0
	for i < len(args) {
		a := args[i]
		if !lits[i] || !strings.HasPrefix(a, "-") || a == "-" {
			return i, opts
		}
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "--") {
			opts = append(opts, [2]string{k, v})
			i++
			continue
		}
		if gitValued[a] && i+1 < len(args) {
			v := args[i+1]
			if !lits[i+1] {
				v = "\x00" // only known at run time
			}
			opts = append(opts, [2]string{a, v})
			i += 2
			continue
		}
		opts = append(opts, [2]string{a, ""})
		i++
	}
	return i, opts
}

// gitHarmlessConfig are configuration keys (lowercase) that git -c may set
// without making git run anything or go elsewhere.
var gitHarmlessConfig = []string{"user.", "color.", "advice.", "column.", "i18n.", "log.", "format.pretty", "init.defaultbranch",
	"core.quotepath", "core.autocrlf", "core.safecrlf", "core.filemode", "core.abbrev", "pull.rebase", "pull.ff", "merge.ff",
	"commit.gpgsign", "tag.gpgsign", "safe.directory", "status.", "diff.renames", "diff.noprefix", "diff.mnemonicprefix"}

// gitHarmless reports whether a git configuration key is one of
// gitHarmlessConfig.
func gitHarmless(key string) bool {
	key = strings.ToLower(key)
	for _, h := range gitHarmlessConfig {
		if key == h || strings.HasSuffix(h, ".") && strings.HasPrefix(key, h) {
			return true
		}
	}
	return false
}

// gitKnown are git's own subcommands; any other name is an alias or an
// external git-NAME program, which can run anything.
var gitKnown = set("add", "am", "annotate", "apply", "archive", "bisect", "blame", "branch", "bundle", "cat-file", "check-attr",
	"check-ignore", "check-mailmap", "checkout", "checkout-index", "cherry", "cherry-pick", "clean", "clone", "commit", "commit-tree",
	"config", "count-objects", "describe", "diff", "diff-files", "diff-index", "diff-tree", "fetch", "for-each-ref", "format-patch",
	"fsck", "gc", "grep", "hash-object", "help", "init", "log", "ls-files", "ls-remote", "ls-tree", "maintenance", "merge",
	"merge-base", "merge-file", "merge-tree", "mktag", "mktree", "mv", "name-rev", "notes", "prune", "pull", "push", "range-diff",
	"read-tree", "rebase", "reflog", "remote", "repack", "replace", "reset", "restore", "rev-list", "rev-parse", "revert", "rm",
	"shortlog", "show", "show-branch", "show-ref", "sparse-checkout", "stash", "status", "submodule", "switch", "symbolic-ref", "tag",
	"update-index", "update-ref", "var", "verify-commit", "verify-pack", "verify-tag", "version", "whatchanged", "worktree", "write-tree",
	"cherry", "difftool", "mergetool", "filter-branch", "instaweb", "send-email", "request-pull", "shell", "daemon", "credential")

// gitReads are the subcommands that change nothing (in the forms
// gitReadForm does not exclude).
var gitReads = set("status", "log", "diff", "show", "blame", "annotate", "grep", "ls-files", "ls-tree", "ls-remote", "rev-parse",
	"rev-list", "describe", "shortlog", "cat-file", "version", "help", "var", "check-ignore", "check-attr", "check-mailmap",
	"count-objects", "diff-files", "diff-index", "diff-tree", "merge-base", "name-rev", "for-each-ref", "show-ref", "show-branch",
	"whatchanged", "cherry", "verify-commit", "verify-tag", "verify-pack", "fsck", "range-diff", "branch", "tag", "remote", "stash",
	"config", "worktree", "notes", "reflog", "symbolic-ref", "submodule", "bisect")

// hasOption reports whether args hold one of opts, alone or with a
// value (--opt=value).
func hasOption(args []string, opts ...string) bool {
	for _, a := range args {
		for _, o := range opts {
			if a == o || strings.HasPrefix(a, o+"=") {
				return true
			}
		}
	}
	return false
}

// gitReadForm reports whether a subcommand that can both list and change
// (branch, tag, remote, stash, config...) only lists in this form; rest
// are the arguments after the subcommand.
func gitReadForm(sub string, rest []string) bool {
	var pos []string
	has := func(opts ...string) bool { return hasOption(rest, opts...) }
	for _, a := range rest {
		if !strings.HasPrefix(a, "-") {
			pos = append(pos, a)
		}
	}
	first := ""
	if len(pos) > 0 {
		first = pos[0]
	}
	switch sub {
	case "branch":
		if has("-d", "-D", "--delete", "-m", "-M", "--move", "-c", "-C", "--copy", "-u", "--set-upstream-to", "--unset-upstream", "--edit-description", "-f", "--force") {
			return false
		}
		return len(pos) == 0 || has("-l", "--list", "--contains", "--merged", "--no-merged", "--points-at")
	case "tag":
		if has("-d", "--delete", "-a", "-s", "-u", "-f", "--force", "-m", "-F") {
			return false
		}
		return len(pos) == 0 || has("-l", "--list", "-v", "--verify")
	case "remote":
		return first == "" || first == "show" || first == "get-url"
	case "stash":
		return first == "list" || first == "show"
	case "config":
		if has("--unset", "--unset-all", "--add", "--replace-all", "--rename-section", "--remove-section", "-e", "--edit") {
			return false
		}
		return has("--get", "--get-all", "--get-regexp", "--get-urlmatch", "-l", "--list") || len(pos) <= 1 || first == "get" || first == "list"
	case "worktree":
		return first == "list"
	case "notes":
		return first == "" || first == "list" || first == "show"
	case "reflog":
		return first != "expire" && first != "delete"
	case "symbolic-ref":
		return len(pos) <= 1 && !has("-d", "--delete")
	case "submodule":
		return first == "" || first == "status" || first == "summary"
	case "bisect":
		return first == "log" || first == "visualize" || first == "view"
	}
	return true
}

// git derives the facts of a git command: its global options (-C works
// from another directory, like cd; -c can make git run commands, and
// --git-dir and --work-tree point it elsewhere: dynamic), its subcommand (unknown
// names are aliases or external programs: dynamic; commands that run
// other commands: dynamic), the network, destructive forms, and writes:
// every subcommand but the reading ones writes the repository.
func (l *locator) git(f *Facts, args []string, lits []bool, globs []int, cwd string) {
	si, opts := gitSubcommand(args, lits)
	for _, o := range opts {
		k, v := o[0], o[1]
		switch {
		case v == "\x00":
			f.Dyn("git " + k + " with a value only known at run time")
		case k == "-C":
			// Like cd: git works from that directory.
			l.note(f, cwd, v, false)
			if d, ok := l.abs(cwd, v); ok {
				cwd = d
			} else {
				cwd = ""
				f.Dyn("git -C " + v + " runs git in a directory only known at run time")
			}
		case k == "-c" || k == "--config-env":
			key, _, _ := strings.Cut(v, "=")
			if !gitHarmless(key) {
				f.Dyn("git " + k + " " + key + " can make git run commands or go elsewhere")
			}
		case k == "--git-dir" || k == "--work-tree" || k == "--exec-path" || k == "--namespace" || k == "--super-prefix":
			f.Dyn("git " + k + " points git at another repository, tree or program")
			if v != "" && looksLikePath(v) {
				l.note(f, cwd, v, false)
			}
		}
	}
	if si >= len(args) {
		return // git --version
	}
	if !lits[si] {
		f.Dyn("the git subcommand is only known at run time: " + args[si])
		return
	}
	sub := args[si]
	rest := args[si+1:]
	restLits := lits[si+1:]
	restGlobs := globs[si+1:]
	if !gitKnown[sub] {
		f.Dyn("git " + sub + " is not a git command: it may be an alias or an external git-" + sub + " program")
	}
	has := func(opts ...string) bool { return hasOption(rest, opts...) }
	switch sub {
	case "push":
		f.Destructive = has("--force", "-f", "--force-with-lease", "--mirror", "--delete", "-d", "--prune")
		for _, a := range rest {
			if strings.HasPrefix(a, "+") || strings.HasPrefix(a, ":") {
				f.Destructive = true
			}
		}
	case "reset":
		f.Destructive = has("--hard", "--merge", "--keep")
	case "clean":
		f.Destructive = true
	case "checkout":
		f.Destructive = has("-f", "--force", "--", ".") || slices.Contains(rest, ".")
	case "restore":
		f.Destructive = true
	case "branch":
		f.Destructive = has("-D") || has("--delete") && has("--force", "-f")
	case "stash":
		f.Destructive = len(rest) > 0 && (rest[0] == "drop" || rest[0] == "clear")
	case "submodule":
		if len(rest) > 0 && rest[0] == "foreach" {
			f.Dyn("git submodule foreach runs a command in each submodule")
		}
	case "bisect":
		if len(rest) > 0 && rest[0] == "run" {
			f.Dyn("git bisect run runs a command")
		}
	case "rebase":
		if slices.ContainsFunc(rest, func(a string) bool { return shortOpt(a, 'x') || longOpt(a, []string{"--exec"}) }) {
			f.Dyn("git rebase --exec runs a command")
		}
	case "filter-branch", "difftool", "mergetool", "send-email", "instaweb", "daemon", "shell", "credential":
		f.Dyn("git " + sub + " runs other programs")
	}
	if why := gitRunsProgram(sub, rest); why != "" {
		f.Code = true
		if f.Why == "" {
			f.Why = why
		}
	}
	if !gitReads[sub] || !gitReadForm(sub, rest) {
		f.Writes = true
		l.note(f, cwd, ".", true)
	}
	if why := gitTreeWrite(sub, rest); why != "" && (cwd == "" || under(cwd, l.mount) || under(l.mount, cwd)) {
		f.AnyFile = why
	}
	if sub == "config" && !gitReadForm(sub, rest) {
		for _, a := range rest {
			if !strings.HasPrefix(a, "-") {
				if !gitHarmless(a) {
					f.Code = true
					if f.Why == "" {
						f.Why = "git config " + a + " can make later git commands run programs"
					}
				}
				break
			}
		}
	}
	valueOpts := valueOptions["git"]
	writeOpts := writeOptions["git"]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--" && restLits[i]:
		case strings.HasPrefix(a, "-") && a != "-":
			k, v, hasValue := strings.Cut(a, "=")
			switch {
			case hasValue && slices.Contains(writeOpts, k) && restLits[i]:
				l.note(f, cwd, v, true)
			case !hasValue && slices.Contains(writeOpts, a) && i+1 < len(rest):
				i++
				if restLits[i] {
					l.note(f, cwd, rest[i], true)
				} else {
					f.Dyn("writes to a file only known at run time: " + rest[i])
				}
			case !hasValue && slices.Contains(valueOpts, a):
				i++
			case hasValue && !restLits[i] && !slices.Contains(valueOpts, k):
				f.Dyn("an option value only known at run time: " + a)
			}
		case !restLits[i]:
			f.Dyn("an argument only known at run time: " + a)
		case hostOf(a) != "" || strings.Contains(a, "://"):
		case sub == "push" || sub == "pull" || sub == "fetch" || sub == "remote":
			// Remote names and refspecs, not paths.
		default:
			// git mv, checkout, restore, rm, stash and apply write the
			// paths they name (git mv notes.md KEEL.md writes KEEL.md).
			l.noteWord(f, cwd, a, restGlobs[i], slices.Contains([]string{"mv", "checkout", "restore", "rm", "stash", "apply", "switch"}, sub))
		}
	}
}

// gitRunsProgram says which option makes git run a program it names:
// --receive-pack, --upload-pack and --exec of the transport commands
// (run on this side for a local or ssh remote), -u of clone, fetch,
// pull and ls-remote, a template directory's hooks (clone, init).
func gitRunsProgram(sub string, rest []string) string {
	transport := slices.Contains([]string{"push", "fetch", "pull", "clone", "ls-remote", "archive", "send-pack", "fetch-pack"}, sub)
	for _, a := range rest {
		if a == "--" {
			break
		}
		k, v, _ := strings.Cut(a, "=")
		switch {
		case transport && longOpt(a, []string{"--receive-pack", "--upload-pack", "--exec"}):
			return "git " + sub + " " + k + " runs the program it names"
		case a == "-u" && slices.Contains([]string{"clone", "fetch", "pull", "ls-remote"}, sub):
			return "git " + sub + " -u runs the program it names"
		case (sub == "clone" || sub == "init") && longOpt(a, []string{"--template"}):
			return "git " + sub + " --template copies hooks that git then runs"
		case sub == "grep" && (shortOpt(a, 'O') || longOpt(a, []string{"--open-files-in-pager"})):
			return "git grep " + k + " runs the program it names on the matching files"
		case sub == "rebase" && (shortOpt(a, 'x') || longOpt(a, []string{"--exec"})):
			return "git rebase " + k + " runs a command"
		case sub == "clone" && (a == "-c" || longOpt(a, []string{"--config"})):
			// The value is the next word or after "=": checked below.
			if v != "" && !gitHarmless(strings.SplitN(v, "=", 2)[0]) {
				return "git clone " + k + " sets configuration that can make git run commands"
			}
		case sub == "clone" && len(a) > 2 && strings.HasPrefix(a, "-c") && a[2] != '-':
			if key, _, _ := strings.Cut(a[2:], "="); !gitHarmless(key) {
				return "git clone " + k + " sets configuration that can make git run commands"
			}
		}
	}
	if sub == "clone" {
		for i, a := range rest[:max(len(rest)-1, 0)] {
			if a == "-c" || a == "--config" || longOpt(a, []string{"--config"}) && !strings.Contains(a, "=") {
				if key, _, _ := strings.Cut(rest[i+1], "="); !gitHarmless(key) {
					return "git clone " + a + " " + key + " sets configuration that can make git run commands"
				}
			}
		}
	}
	return ""
}

// projectRunners are the well-known programs that run the project's own
// code (its build files, tests, scripts and hooks), with the subcommands
// that do; nil means every use does.
var projectRunners = map[string][]string{
	"make":    nil,
	"gmake":   nil,
	"pytest":  nil,
	"py.test": nil,
	"tox":     nil,
	"nox":     nil,
	"npx":     nil,
	"npm":     {"run", "run-script", "rum", "urn", "test", "t", "tst", "exec", "x", "start", "restart", "stop", "install", "i", "add", "ci", "rebuild"},
	"yarn":    {"run", "test", "exec", "start", "install", "add", "dlx", "node"},
	"pnpm":    {"run", "test", "t", "exec", "start", "install", "i", "add", "dlx", "rebuild"},
	"go":      {"run", "test", "generate"},
	"cargo":   {"run", "r", "test", "t", "build", "b", "bench", "check", "c", "install"},
	"pip":     {"install"},
	"pip3":    {"install"},
	"git":     {"commit", "merge", "rebase", "am", "pull"},
}

// projectInfo are the options that only print information.
var projectInfo = set("--version", "-V", "--help", "-h")

// projectCode returns why a command runs code of the project that the
// analysis cannot see, or "": a program named by a path outside the
// system directories (./run.sh, build/tool), or a runner of project code
// (make, pytest, npm test, go test, git commit and its hooks...).
func (l *locator) projectCode(c *Command, name string, args []string, lits []bool, cwd string) string {
	prog := c.Words[c.Prog]
	if strings.Contains(prog, "/") && c.Prog < len(c.Literal) && c.Literal[c.Prog] {
		if p, ok := l.abs(cwd, prog); !ok || l.class(p) != locSystem {
			return "runs the program " + prog + ", whose code Keel cannot see"
		}
	}
	subs, ok := projectRunners[name]
	if !ok {
		return ""
	}
	if len(args) > 0 && !slices.ContainsFunc(args, func(a string) bool { return !projectInfo[a] }) {
		return "" // --version
	}
	if subs == nil {
		return name + " runs the project's own code (its build files, tests or scripts)"
	}
	sub := c.Subcommand()
	if name == "yarn" && sub == "" && len(args) == 0 {
		sub = "install" // a bare yarn installs, running install scripts
	}
	if !slices.Contains(subs, sub) && (name != "yarn" || sub == "" || yarnBuiltin[sub]) {
		return ""
	}
	if name == "git" {
		return "git " + sub + " runs the repository's hooks"
	}
	return name + " " + sub + " runs the project's own code (its build files, tests or scripts)"
}

// yarnBuiltin are yarn's own commands; any other first word names a
// script of the project (yarn lint).
var yarnBuiltin = set("add", "audit", "bin", "cache", "config", "create", "dlx", "exec", "explain", "info", "init", "install", "link", "list", "node", "npm", "outdated", "pack", "plugin", "rebuild", "remove", "run", "set", "unlink", "up", "upgrade", "version", "why", "workspace", "workspaces", "help")
