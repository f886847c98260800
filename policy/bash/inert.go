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
			case k == "-I" || k == "-F" || longOpt(a, []string{"--use-compress-program", "--to-command", "--checkpoint-action",
				"--info-script", "--new-volume-script", "--rsh-command", "--rmt-command"}, "--checkpoint"):
				return false
			case strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsAny(a[1:], "IF"):
				return false // a cluster such as -xIf
			case !strings.HasPrefix(a, "-") && a == args[0] && strings.ContainsAny(a, "IF"):
				return false // old-style options: tar xIf
			}
		}
		return true
	case "sort":
		return !anyLongOpt(args, []string{"--compress-program"})
	case "split":
		return !anyLongOpt(args, []string{"--filter"})
	case "zip":
		// -TT/--unzip-command runs the program it names to test.
		return !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-TT") }) && !anyLongOpt(args, []string{"--unzip-command"})
	case "install":
		return !anyLongOpt(args, []string{"--strip-program"}, "--strip")
	case "rg":
		// --pre runs a program on every file searched (ripgrep takes
		// long options only in full).
		return !slices.ContainsFunc(args, func(a string) bool { return a == "--pre" || strings.HasPrefix(a, "--pre=") })
	case "ag":
		return !anyLongOpt(args, []string{"--pager"})
	case "ack":
		// --pager, and the same option in an .ackrc the project holds.
		return false
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

// longOpt reports whether the word a is one of the long options opts,
// alone or with its value, in full or abbreviated: GNU getopt_long and
// git's parse-options take any prefix of a long option that no other
// option shares (sort --compress-prog=x runs x). An ambiguous prefix
// also counts (the program then refuses it, so nothing is lost); exact
// are a program's own options that are prefixes of one of opts (tar
// --checkpoint, install --strip), which mean themselves.
func longOpt(a string, opts []string, exact ...string) bool {
	k, _, _ := strings.Cut(a, "=")
	if len(k) <= 2 || !strings.HasPrefix(k, "--") || slices.Contains(exact, k) {
		return false
	}
	return slices.ContainsFunc(opts, func(o string) bool { return strings.HasPrefix(o, k) })
}

// anyLongOpt reports whether one of args, up to a "--", is one of the
// long options opts (longOpt).
func anyLongOpt(args []string, opts []string, exact ...string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if longOpt(a, opts, exact...) {
			return true
		}
	}
	return false
}

// shortOpt reports whether the word a is a cluster of short options
// holding c (-iO, -xIf).
func shortOpt(a string, c byte) bool {
	return len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.IndexByte(a[1:], c) >= 0
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
