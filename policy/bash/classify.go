package bash

import (
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/keel-run/keel/internal/realpath"
)

// Location classes of a path, from the policy's point of view.
const (
	locWorkspace = "workspace" // under the mount path
	locScratch   = "scratch"   // the sandbox's private scratch space (/tmp, HOME, /dev/null...)
	locSystem    = "system"    // read-only system directories (/usr, /bin, /lib...)
	locOutside   = "outside"   // anything else
	locUnknown   = "unknown"   // relative to a directory only known at run time
)

// Facts are what the analysis finds of one part, from its text alone
// (and, without a sandbox, from where the workspace's symbolic links
// lead): the paths it reads and writes and where they lie, the hosts it
// reaches, and what it cannot know. The policy engine describes the
// parts of other tools with the same facts.
type Facts struct {
	Reads, Written []string // classified paths, absolute and cleaned
	Outside        []string // paths outside workspace, scratch and system
	WritesOutside  []string // written paths outside workspace and scratch
	Hosts          []string
	Network        bool
	Writes         bool
	Destructive    bool
	// Dynamic: what runs, or what it works on, is only known at run
	// time.
	Dynamic bool
	// Code: the part runs code the analysis cannot see (an interpreter or
	// a shell on a script file or a code string, a runner of the
	// project's own code).
	Code bool
	// Why explains Dynamic and Code, for people.
	Why string
	// Opaque says why Keel does not know that a command with neither
	// Code nor Dynamic set, and no network, runs nothing else and opens
	// no connection: a program it does not know (openssl, sqlite3), a
	// variable set for it, or configuration written in HOME ("" when it
	// knows). In a run that may reach a host, such a command may send
	// what its words do not show.
	Opaque string
	// Sends says what a network command sends besides the words of its
	// command line (a file's content, its input, a push's commits); ""
	// when it sends only what its words show.
	Sends string
	// Unresolved are the targets of writes the analysis cannot name, as
	// written: a pattern (> AGENT?.md, sed -i x KEE?.md), a word only
	// known at run time (> $f, cp a "$(echo d)"), a relative path in a
	// directory only known at run time (cd $d && echo > KEEL.md). Any
	// file may be among them.
	Unresolved []string
	// AnyFile says why the part may write files of the workspace whose
	// names its words do not show ("" when Written lists all it writes):
	// git checkout other, git stash pop, git apply p.diff write the files
	// of a commit, a stash or a patch. The policy counts such a part as
	// writing any file, a file that runs on its own included.
	AnyFile string
}

// Dyn marks f dynamic, keeping the first explanation.
func (f *Facts) Dyn(why string) {
	f.Dynamic = true
	if f.Why == "" {
		f.Why = why
	}
}

// locator classifies paths against the mount path and the policy's
// scratch and system lists.
type locator struct {
	mount   string
	scratch []string
	system  []string
	// homeSet is set when the command line assigns HOME: "~" then means
	// whatever it was set to.
	homeSet bool
	// host is the workspace's host directory, symbolic links resolved,
	// when commands run without a sandbox: a path word under the mount
	// path is then also resolved on the host file system, so that a
	// symbolic link in the workspace cannot lead a command outside it.
	host string
}

// hostClass classifies a path resolved on the host (see locator.host).
func (l *locator) hostClass(r string) string {
	if under(r, l.host) {
		return locWorkspace
	}
	m := l.mount
	l.mount = l.host
	defer func() { l.mount = m }()
	return l.class(r)
}

// abs resolves word against cwd ("" means unknown) into an absolute,
// cleaned path; "~" prefixes stay as "~".
func (l *locator) abs(cwd, word string) (string, bool) {
	switch {
	case word == "~" || strings.HasPrefix(word, "~/"):
		return path.Clean(word), true
	case strings.HasPrefix(word, "~"):
		return "/home/" + strings.TrimPrefix(path.Clean(word), "~"), true // ~user
	case strings.HasPrefix(word, "/"):
		return path.Clean(word), true
	case cwd == "":
		return "", false
	}
	return path.Join(cwd, word), true
}

func under(p, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	return p == prefix || strings.HasPrefix(p, prefix+"/") || prefix == ""
}

func (l *locator) class(p string) string {
	if p == "" {
		return locUnknown
	}
	if under(p, l.mount) {
		return locWorkspace
	}
	for _, s := range l.scratch {
		if under(p, s) {
			return locScratch
		}
	}
	for _, s := range l.system {
		if under(p, s) {
			return locSystem
		}
	}
	return locOutside
}

// noteWord records a path word the part reads or writes; glob is the
// offset of its first pattern character or -1 (see Command.Glob). A
// pattern is recorded as the directory its matches lie under, unless it
// could match ".." and so reach anywhere.
func (l *locator) noteWord(f *Facts, cwd, word string, glob int, write bool) {
	if glob >= 0 && glob <= len(word) {
		dir, rest := word[:glob], word[glob:]
		if i := strings.LastIndexByte(dir, '/'); i >= 0 {
			dir, rest = dir[:i+1], dir[i+1:]+rest
		} else {
			dir, rest = "", dir+rest
		}
		for _, seg := range strings.Split(rest, "/") {
			if seg == ".." || strings.HasPrefix(seg, ".") && strings.ContainsAny(seg, "*?[") || strings.Contains(seg, "(") {
				f.Dyn("the pattern " + word + " can match .. and reach paths outside its directory")
			}
		}
		if dir == "" {
			dir = "."
		}
		if write {
			f.Unresolved = appendNew(f.Unresolved, word)
		}
		word = dir
	}
	l.note(f, cwd, word, write)
}

// procEscape reports whether p reaches another path through /proc: the
// root, working directory or open files of a process.
func procEscape(p string) bool {
	rest, ok := strings.CutPrefix(p, "/proc/")
	if !ok {
		return false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 {
		return false
	}
	if parts[0] == "thread-self" || parts[0] == "self" || isNumber(parts[0]) || strings.ContainsAny(parts[0], "*?[") {
		switch parts[1] {
		case "root", "cwd", "fd", "map_files", "exe", "task":
			return true
		}
	}
	return false
}

// note records a path the part reads or writes.
func (l *locator) note(f *Facts, cwd, word string, write bool) {
	if l.homeSet && strings.HasPrefix(word, "~") {
		f.Dynamic = true
		if f.Why == "" {
			f.Why = "HOME is set on the same command line, so " + word + " is only known at run time"
		}
	}
	p, ok := l.abs(cwd, word)
	c := locUnknown
	if ok {
		c = l.class(p)
		if procEscape(p) {
			f.Dyn("reaches another path through " + p)
		}
		if c == locWorkspace && l.host != "" {
			raw := word
			if !strings.HasPrefix(raw, "/") {
				raw = cwd + "/" + word
			}
			if r := realpath.Resolve(raw); l.hostClass(r) != locWorkspace {
				// A symbolic link in the workspace leads out of it.
				p, c = r, l.hostClass(r)
			}
		}
	} else {
		p = word
		if write {
			f.Unresolved = appendNew(f.Unresolved, word)
		}
	}
	if write {
		f.Writes = true
		f.Written = appendNew(f.Written, p)
	} else {
		f.Reads = appendNew(f.Reads, p)
	}
	switch c {
	case locOutside:
		f.Outside = appendNew(f.Outside, p)
		if write {
			f.WritesOutside = appendNew(f.WritesOutside, p)
		}
	case locSystem:
		if write {
			f.WritesOutside = appendNew(f.WritesOutside, p)
		}
	case locUnknown:
		if write {
			f.WritesOutside = appendNew(f.WritesOutside, p)
		}
	}
}

func appendNew(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// Program tables. They describe common Unix and developer tools; a program
// not listed is analysed generically (every literal argument may be a path
// it reads).
var (
	// writeAll: every path argument is written.
	writeAll = set("rm", "rmdir", "touch", "mkdir", "chmod", "chown", "chgrp", "truncate", "tee", "shred", "unlink",
		"mkfifo", "mknod", "chattr", "setfacl", "tar", "unzip", "gunzip", "gzip", "bunzip2", "xz", "unxz", "zip", "patch", "sponge")
	// writeLast: the last path argument is written, the others read (mv
	// also removes its sources).
	writeLast = set("cp", "ln", "install", "rsync", "scp")
	// noPaths: arguments are data, not file names.
	noPaths = set("echo", "printf", "true", "false", "exit", "return", "set", "shift", "read", "export", "declare",
		"local", "readonly", "typeset", "unset", "alias", "sleep", "kill", "pkill", "seq", "expr", "let")
	// patternFirst: the first non-option argument is a pattern or program
	// unless one is given with an option.
	patternFirst = map[string][]string{
		"grep": {"-e", "--regexp", "-f", "--file"}, "egrep": {"-e", "-f"}, "fgrep": {"-e", "-f"},
		"rg": {"-e", "--regexp", "-f", "--file"}, "ag": {}, "ack": {},
		"sed": {"-e", "--expression", "-f", "--file"}, "awk": {"-f"}, "gawk": {"-f"}, "mawk": {"-f"}, "jq": {"-f", "--from-file"},
	}
	// valueOptions: options whose next word is data, not a path.
	valueOptions = map[string][]string{
		"git":     {"-m", "--message", "-c", "--author", "--format", "--pretty", "-b", "-B"},
		"grep":    {"-e", "--regexp", "-A", "-B", "-C", "-m", "--include", "--exclude"},
		"rg":      {"-e", "--regexp", "-g", "--glob", "-t", "--type", "-A", "-B", "-C", "-m"},
		"sed":     {"-e", "--expression"},
		"awk":     {"-v", "-F"},
		"find":    {"-name", "-iname", "-path", "-ipath", "-regex", "-type", "-newer", "-mtime", "-size", "-perm", "-user", "-maxdepth", "-mindepth", "-printf"},
		"python":  {"-c", "-m", "-W", "-X"},
		"python3": {"-c", "-m", "-W", "-X"},
		"node":    {"-e", "--eval", "-p", "--print"},
		"perl":    {"-e", "-E"},
		"ruby":    {"-e"},
		"php":     {"-r"},
		"curl":    {"-d", "--data", "--data-raw", "-H", "--header", "-u", "--user", "-X", "--request", "-A", "--user-agent", "-w", "--write-out"},
		"sort":    {"-k", "-t"},
		"cut":     {"-d", "-f", "-c"},
		"head":    {"-n", "-c"},
		"tail":    {"-n", "-c"},
		"xargs":   {"-I", "-n", "-P", "-L", "-d"},
		"mkdir":   {"-m", "--mode"},
		"install": {"-m", "--mode", "-o", "-g"},
		"chmod":   {},
		"tar":     {"--exclude"},
	}
	// readOnly programs change nothing (risk "low").
	readOnly = set("ls", "cat", "head", "tail", "less", "more", "wc", "grep", "egrep", "fgrep", "rg", "ag", "ack", "find",
		"pwd", "echo", "printf", "stat", "file", "du", "df", "which", "type", "whoami", "id", "date", "printenv", "diff",
		"cmp", "sort", "uniq", "cut", "tr", "tree", "realpath", "readlink", "basename", "dirname", "true", "false", "test",
		"[", "nl", "od", "xxd", "hexdump", "strings", "jq", "column", "comm", "md5sum", "sha1sum", "sha256sum", "cd", "pushd",
		"popd", "sleep", "seq", "uname", "hostname", "env", "tac", "rev", "fold", "fmt", "expand", "unexpand", "paste", "join")
	// netAlways: programs that use the network whatever their arguments.
	netAlways = set("curl", "wget", "ssh", "scp", "sftp", "nc", "ncat", "netcat", "telnet", "ftp", "ping", "ping6", "dig",
		"nslookup", "host", "whois", "socat", "aria2c", "http", "https", "lynx", "w3m", "links", "mosh", "npx", "bunx", "pnpx",
		"rclone", "gsutil", "aws", "az", "gcloud", "kubectl", "helm")
	// netSub: programs that use the network for these subcommands.
	netSub = map[string][]string{
		"git":      {"clone", "fetch", "pull", "push", "ls-remote", "submodule"},
		"pip":      {"install", "download", "wheel", "search"},
		"pip3":     {"install", "download", "wheel", "search"},
		"pipx":     {"install", "run", "upgrade"},
		"uv":       {"pip", "add", "sync", "run", "tool"},
		"poetry":   {"install", "add", "update", "lock"},
		"npm":      {"install", "i", "ci", "add", "update", "up", "publish", "view", "info", "exec", "create", "init"},
		"pnpm":     {"install", "i", "add", "update", "up", "publish", "dlx", "create"},
		"yarn":     {"install", "add", "upgrade", "up", "publish", "dlx", "create"},
		"bun":      {"install", "i", "add", "update", "x", "create"},
		"go":       {"get", "install", "mod"},
		"cargo":    {"install", "fetch", "update", "search", "publish", "add"},
		"gem":      {"install", "update", "fetch"},
		"bundle":   {"install", "update"},
		"composer": {"install", "require", "update"},
		"apt":      {"install", "update", "upgrade", "download", "full-upgrade"},
		"apt-get":  {"install", "update", "upgrade", "download", "dist-upgrade", "source"},
		"dnf":      {"install", "update", "upgrade", "download"},
		"yum":      {"install", "update", "upgrade"},
		"apk":      {"add", "update", "upgrade", "fetch"},
		"pacman":   {"-S", "-Sy", "-Syu"},
		"brew":     {"install", "update", "upgrade", "fetch", "tap"},
		"docker":   {"pull", "push", "login", "search", "build", "run"},
		"podman":   {"pull", "push", "login", "search", "build", "run"},
		"conda":    {"install", "create", "update"},
		"mamba":    {"install", "create", "update"},
	}
)

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// hostOf returns the host of a URL-like word ("https://h/x", "git@h:x"),
// or "".
func hostOf(word string) string {
	if i := strings.Index(word, "://"); i > 0 {
		scheme := strings.ToLower(word[:i])
		if !isURLScheme(scheme) {
			return ""
		}
		u, err := url.Parse(word)
		if err != nil || u.Hostname() == "" {
			return ""
		}
		return strings.ToLower(u.Hostname())
	}
	// scp-like "user@host:path".
	if at := strings.Index(word, "@"); at > 0 && !strings.Contains(word[:at], "/") {
		rest := word[at+1:]
		if c := strings.Index(rest, ":"); c > 0 && !strings.Contains(rest[:c], "/") {
			return strings.ToLower(rest[:c])
		}
	}
	return ""
}

func isURLScheme(s string) bool {
	switch s {
	case "http", "https", "ftp", "ftps", "ssh", "git", "ws", "wss", "rsync", "sftp", "scp", "s3", "gs", "git+ssh", "git+https", "svn":
		return true
	}
	return false
}

// looksLikePath reports whether an option value names a file: it is
// absolute, starts with "~" or "." or contains a slash.
func looksLikePath(v string) bool {
	return strings.HasPrefix(v, "/") || strings.HasPrefix(v, "~") || strings.HasPrefix(v, ".") || strings.Contains(v, "/")
}

// firstPositional returns the first literal argument that is not an
// option, or "".
func firstPositional(args []string, lits []bool) string {
	for i, a := range args {
		if !lits[i] {
			return ""
		}
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return ""
}

// cd returns the directory a cd or pushd command changes to, given the
// current one ("" when unknown), and whether the target is known. When
// the command line mentions CDPATH (cdpath), a relative target not
// starting with "." may be found under any directory CDPATH lists, so it
// is unknown.
func (l *locator) cd(c *Command, cwd string, cdpath bool) (string, bool) {
	args := c.Args()
	lits := c.Literal[min(c.Prog+1, len(c.Literal)):]
	globs := c.Glob[min(c.Prog+1, len(c.Glob)):]
	for i, a := range args {
		if a == "-L" || a == "-P" || a == "-e" || a == "-@" {
			continue
		}
		if !lits[i] || a == "-" || globs[i] >= 0 || strings.HasPrefix(a, "+") {
			return "", false
		}
		if cdpath && !strings.HasPrefix(a, "/") && !strings.HasPrefix(a, "~") && !strings.HasPrefix(a, ".") {
			return "", false
		}
		p, ok := l.abs(cwd, a)
		return p, ok
	}
	return "~", true
}
