package bash

import (
	"path"
	"slices"
	"strings"
)

// inertOnly: programs Keel knows to run no other program and to open no
// connection, beyond the tables of classify.go (readOnly, noPaths,
// writeAll, writeLast), in every form the analysis does not already mark
// as running code (sed e, awk system(), find -exec and git are analysed
// for what they run). tar and sort are inert only in the forms
// inertForm accepts.
var inertOnly = set("mv", "sed", "awk", "gawk", "mawk", "nawk", "git", "base64", "base32", "basenc", "zcat", "bzcat", "xzcat",
	"zless", "bzip2", "lzma", "unlzma", "zstd", "unzstd", "sha224sum", "sha384sum", "sha512sum", "b2sum", "cksum", "sum",
	"yes", "dd", "mktemp", "locale", "getconf", "nproc", "free", "ps", "uptime", "wait", "jobs", "exit", "hash",
	"cd", "pushd", "popd", "dirs", "umask", "ulimit", "shopt", "getopts", "type", "iconv", "csplit", "split", "shuf", "tsort",
	"numfmt", "factor", "pr", "look", "ptx", "sha1sum", "md5sum", "truncate", "sync", "lsof", "file", "unzip", "zipinfo")

// inert reports whether name is a program Keel knows to run no other
// program and open no connection with these arguments.
func inert(name string, args []string) bool {
	switch name {
	case "tar":
		// -I/--use-compress-program, --to-command, --checkpoint-action,
		// --info-script/-F/--new-volume-script and --rsh-command run a
		// program; -z, -j, -J run the usual compressors.
		for _, a := range args {
			if a == "--" {
				break
			}
			k, _, _ := strings.Cut(a, "=")
			switch {
			case slices.Contains([]string{"-I", "--use-compress-program", "--to-command", "--checkpoint-action", "--info-script",
				"-F", "--new-volume-script", "--rsh-command", "--rmt-command"}, k):
				return false
			case strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsAny(a[1:], "IF"):
				return false // a cluster such as -xIf
			case !strings.HasPrefix(a, "-") && a == args[0] && strings.ContainsAny(a, "IF"):
				return false // old-style options: tar xIf
			}
		}
		return true
	case "sort":
		return !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--compress-program") })
	case "split":
		return !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--filter") })
	case "zip":
		// -TT/--unzip-command runs the program it names to test.
		return !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-TT") || strings.HasPrefix(a, "--unzip-command") })
	case "install":
		return !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--strip-program") })
	case "patch":
		// An ed-style patch is run by ed, whose ! runs commands.
		return false
	case "rsync", "scp", "env", "less", "more":
		// rsync and scp run a remote shell (-e); env runs its command
		// (the parser looks through it: a bare env prints); less and more
		// run LESSOPEN and the commands of !.
		return name == "env"
	}
	return readOnly[name] || noPaths[name] || writeAll[name] || writeLast[name] || inertOnly[name]
}

// harmlessAssign: variables that change no program's choice of what to
// run or read beyond its words.
func harmlessAssign(name string) bool {
	if harmlessEnv(name) {
		return true
	}
	switch name {
	case "CI", "DEBUG", "NODE_ENV", "FORCE_COLOR", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "GIT_AUTHOR_NAME",
		"GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE", "TMPDIR":
		return true
	}
	return false
}

// opaque says why Keel does not know that a command, which the analysis
// found to run no code it cannot see (f.Code, f.Dynamic unset) and to use
// no network, runs nothing else and opens no connection: a program Keel
// does not know (openssl s_client, sqlite3 .shell, script -c), a
// variable set for it (GIT_EXTERNAL_DIFF, LD_PRELOAD, PAGER), variables
// exported earlier on the line, or a write of configuration in HOME a
// later program reads (~/.gitconfig). "" when it knows.
func opaque(c *Command, f *Facts, exports string) string {
	if f.Code || f.Dynamic || f.Network {
		return ""
	}
	name := c.Name()
	for _, a := range c.Assigns {
		if !harmlessAssign(a) {
			if name == "" {
				continue // X=1 alone sets a shell variable
			}
			return name + " runs with " + a + " set, which may make it run a program or read a file an earlier command wrote"
		}
	}
	if name == "" {
		return ""
	}
	if exports != "" {
		return "an earlier command of the line (" + exports + ") sets variables " + name + " may read (which program to run, which file to load)"
	}
	if !inert(name, c.Args()) {
		return name + " is not a program Keel knows to run no other program and open no connection"
	}
	for _, w := range f.Written {
		if homeConfig(w) {
			return "writes " + w + ", configuration a later program reads (git, curl, a shell)"
		}
	}
	return ""
}

// homeConfig reports whether a written path is a dotfile or under a dot
// directory of HOME (~/.gitconfig, ~/.config/git/config, ~/.netrc).
func homeConfig(w string) bool {
	var rel string
	switch {
	case strings.HasPrefix(w, "~/"):
		rel = w[2:]
	case strings.HasPrefix(w, "/root/"):
		rel = w[len("/root/"):]
	default:
		return false
	}
	return strings.HasPrefix(path.Clean(rel), ".")
}
