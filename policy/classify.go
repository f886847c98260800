package policy

import (
	"net/url"
	"path"
	"slices"
	"strings"
)

// Location classes of a path, from the policy's point of view.
const (
	locWorkspace = "workspace" // under the mount path
	locScratch   = "scratch"   // the sandbox's private scratch space (/tmp, HOME, /dev/null...)
	locSystem    = "system"    // read-only system directories (/usr, /bin, /lib...)
	locOutside   = "outside"   // anything else
	locUnknown   = "unknown"   // relative to a directory only known at run time
)

// facts are what the engine tells the policy about one part, derived from
// the command line alone.
type facts struct {
	reads, written []string // classified paths, absolute and cleaned
	outside        []string // paths outside workspace, scratch and system
	writesOutside  []string // written paths outside workspace and scratch
	hosts          []string
	network        bool
	writes         bool
	destructive    bool
	dynamic        bool
	why            string
}

func (f *facts) risk(readOnlyProgram bool) string {
	switch {
	case f.network || len(f.outside) > 0 || len(f.writesOutside) > 0 || f.dynamic || f.destructive:
		return "high"
	case f.writes || !readOnlyProgram:
		return "medium"
	}
	return "low"
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

// note records a path the part reads or writes.
func (l *locator) note(f *facts, cwd, word string, write bool) {
	if l.homeSet && strings.HasPrefix(word, "~") {
		f.dynamic = true
		if f.why == "" {
			f.why = "HOME is set on the same command line, so " + word + " is only known at run time"
		}
	}
	p, ok := l.abs(cwd, word)
	c := locUnknown
	if ok {
		c = l.class(p)
	} else {
		p = word
	}
	if write {
		f.writes = true
		f.written = appendNew(f.written, p)
	} else {
		f.reads = appendNew(f.reads, p)
	}
	switch c {
	case locOutside:
		f.outside = appendNew(f.outside, p)
		if write {
			f.writesOutside = appendNew(f.writesOutside, p)
		}
	case locSystem:
		if write {
			f.writesOutside = appendNew(f.writesOutside, p)
		}
	case locUnknown:
		if write {
			f.writesOutside = appendNew(f.writesOutside, p)
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

// analyse derives the facts of one command; cwd is the directory the
// command runs in ("" when unknown).
func (l *locator) analyse(c *Command, cwd string) *facts {
	f := &facts{dynamic: c.Dynamic, why: c.Why}
	for _, r := range c.Redirects {
		switch {
		case r.Target == "":
		case !r.Literal && r.Write:
			f.writes = true
			f.dynamic = true
			if f.why == "" {
				f.why = "writes to a file only known at run time: " + r.Target
			}
		case r.Literal:
			l.note(f, cwd, r.Target, r.Write)
		}
	}
	name := c.Name()
	if name == "" {
		return f
	}
	args := c.Args()
	lits := c.Literal[min(c.Prog+1, len(c.Literal)):]
	// Network.
	if netAlways[name] {
		f.network = true
	}
	sub := firstPositional(args, lits)
	if subs, ok := netSub[name]; ok && sub != "" && slices.Contains(subs, sub) && !slices.Contains(args, "--no-index") && !slices.Contains(args, "--offline") {
		f.network = true
	}
	if (name == "python" || name == "python3") && len(args) >= 3 && args[0] == "-m" && (args[1] == "pip" || args[1] == "ensurepip") {
		if slices.Contains([]string{"install", "download", "wheel"}, args[2]) && !slices.Contains(args, "--no-index") {
			f.network = true
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
			f.hosts = appendNew(f.hosts, h)
			f.network = true
		}
	}
	if name == "ssh" || name == "mosh" {
		if h := firstPositional(args, lits); h != "" {
			if _, host, ok := strings.Cut(h, "@"); ok {
				h = host
			}
			f.hosts = appendNew(f.hosts, strings.ToLower(h))
		}
	}
	// Destructive forms.
	switch name {
	case "rm":
		for _, a := range args {
			if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsAny(a, "rRf") || a == "--recursive" || a == "--force" {
				f.destructive = true
			}
		}
	case "dd", "shred", "mkfs", "mkfs.ext4", "mkfs.vfat", "wipefs", "fdisk", "parted":
		f.destructive = true
	case "git":
		switch sub {
		case "push":
			f.destructive = slices.Contains(args, "--force") || slices.Contains(args, "-f") || slices.Contains(args, "--force-with-lease")
		case "reset":
			f.destructive = slices.Contains(args, "--hard")
		case "clean":
			f.destructive = true
		}
	case "chmod", "chown", "chgrp":
		f.destructive = slices.Contains(args, "-R") || slices.Contains(args, "--recursive")
	}
	if noPaths[name] {
		return f
	}
	// Paths.
	var positional []string
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
	inPlace := (name == "sed" || name == "perl") && hasInPlace(args)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !lits[i] {
			continue
		}
		if a == "--" {
			continue
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			if k, v, ok := strings.Cut(a, "="); ok {
				if name == "dd" {
					continue
				}
				if !slices.Contains(valueOpts, k) && looksLikePath(v) {
					l.note(f, cwd, v, inPlace)
				}
				continue
			}
			if slices.Contains(valueOpts, a) {
				i++
			}
			continue
		}
		if name == "dd" {
			continue
		}
		if hostOf(a) != "" || strings.Contains(a, "://") {
			continue
		}
		if skipFirst {
			skipFirst = false
			continue
		}
		positional = append(positional, a)
	}
	if name == "dd" {
		for _, a := range args {
			if k, v, ok := strings.Cut(a, "="); ok && (k == "if" || k == "of") {
				l.note(f, cwd, v, k == "of")
			}
		}
	}
	for i, a := range positional {
		write := false
		switch {
		case writeAll[name], inPlace, name == "mv":
			write = true
		case writeLast[name]:
			write = i == len(positional)-1 && len(positional) > 1
		case name == "find":
			write = slices.Contains(args, "-delete")
		}
		if name == "git" && i == 0 {
			continue // the subcommand
		}
		l.note(f, cwd, a, write)
	}
	if writeAll[name] || name == "mv" || writeLast[name] || inPlace {
		f.writes = true
	}
	return f
}

func hasInPlace(args []string) bool {
	for _, a := range args {
		if a == "-i" || strings.HasPrefix(a, "-i") && !strings.HasPrefix(a, "--") || strings.HasPrefix(a, "--in-place") {
			return true
		}
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
// current one ("" when unknown), and whether the target is known.
func (l *locator) cd(c *Command, cwd string) (string, bool) {
	args := c.Args()
	lits := c.Literal[min(c.Prog+1, len(c.Literal)):]
	for i, a := range args {
		if a == "-L" || a == "-P" || a == "-e" || a == "-@" {
			continue
		}
		if !lits[i] || a == "-" {
			return "", false
		}
		p, ok := l.abs(cwd, a)
		return p, ok
	}
	return "~", true
}
