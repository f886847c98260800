package bash

import (
	"path"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// letters reports whether s is only ASCII letters (a cluster of short
// options).
func letters(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; c < 'a' || c > 'z' {
			return false
		}
	}
	return s != ""
}

// RunsBeyond reports whether the words of a command after its first n
// make it run code Keel cannot read, or only know at run time, or send
// what its words do not show, where the first n words alone do not (git
// push origin --receive-pack=./x.sh, tar -cf a.tar -I ./x.sh): a
// remembered prefix covers the words that follow it only when they add
// none of that. words are the command's literal words from argv[0] on.
func RunsBeyond(words []string, n int) bool {
	if len(words) <= n {
		return false
	}
	full, ok := wordFacts(words)
	pre, ok2 := wordFacts(words[:n])
	if !ok || !ok2 {
		return true
	}
	return full.Code && !pre.Code || full.Dynamic && !pre.Dynamic || full.Opaque != "" && pre.Opaque == "" || full.Sends != "" && pre.Sends == ""
}

// wordFacts analyses literal words as one command line (in a workspace
// at /workspace) and merges the facts of its parts; false when they do
// not quote or parse.
func wordFacts(words []string) (Facts, bool) {
	q := make([]string, len(words))
	for i, w := range words {
		s, err := syntax.Quote(w, syntax.LangBash)
		if err != nil {
			return Facts{}, false
		}
		q[i] = s
	}
	parts, _, _, err := Analyse(strings.Join(q, " "), Env{Mount: "/workspace", Scratch: []string{"/tmp"}}, 0)
	if err != nil {
		return Facts{}, false
	}
	var f Facts
	for _, p := range parts {
		f.Code = f.Code || p.Facts.Code
		f.Dynamic = f.Dynamic || p.Facts.Dynamic
		if f.Opaque == "" {
			f.Opaque = p.Facts.Opaque
		}
		if f.Sends == "" {
			f.Sends = p.Facts.Sends
		}
	}
	return f, true
}

// WritesBeyond reports whether the words of a command after its first n
// make its program write or delete files, as a redirection does: an
// option whose value is a file written (sort -o, curl --output=F, git
// diff --output, find -fprint), an in-place edit (sed -i, perl -pi),
// find's -delete, the second operand of uniq, xxd or split, or a git
// subcommand (or its form: stash pop, worktree add) beyond the prefix
// that changes files outside the repository's .git ([gitTreeBeyond]). A
// remembered prefix covers the words that follow it only when they
// have no such effect. command is the program as written (argv[0]
// after wrappers), words the command's literal words from argv[0] on.
func WritesBeyond(command string, words []string, n int) bool {
	if len(words) <= n {
		return false
	}
	name := path.Base(command)
	if name == "." || name == "/" || name == "" {
		name = path.Base(words[0])
	}
	rest := words[n:]
	if name == "git" && gitTreeBeyond(words, n) {
		return true
	}
	for _, w := range rest {
		for _, o := range writeOptions[name] {
			switch {
			case w == o, strings.HasPrefix(w, o+"="):
				return true
			case len(o) == 2 && o[0] == '-' && o[1] != '-' && len(w) > 2 && w[0] == '-' &&
				(w[1] == o[1] || letters(w[1:]) && strings.IndexByte(w[1:], o[1]) >= 0):
				// An attached value (-oFILE) or a cluster (-uo FILE).
				return true
			case len(o) > 2 && o[1] != '-' && strings.HasPrefix(w, o):
				// find's -fprint0, -fprintf.
				return true
			}
		}
	}
	switch name {
	case "sed", "perl", "ruby":
		return hasInPlace(rest)
	case "find":
		return slices.Contains(rest, "-delete")
	}
	if secondWrites[name] {
		// The second operand is written: beyond the prefix?
		k := 0
		for i, w := range words[1:] {
			if strings.HasPrefix(w, "-") && w != "-" {
				continue
			}
			if k++; k == 2 {
				return i+1 >= n
			}
		}
	}
	return false
}

// gitTreeBeyond reports whether a git command's subcommand, or the word
// that chooses its form (bundle create, worktree add, stash pop), lies
// beyond the first n words and makes git write or delete files outside
// .git: the working tree (checkout, reset --hard, clean, rm, stash, merge,
// apply...) or files and directories its operands name (bundle create
// FILE, worktree add DIR, init DIR, clone URL DIR, format-patch). A
// prefix that names the subcommand and its form ("git worktree add")
// covers them: the person named what they allow. words are literal, from
// argv[0] on.
func gitTreeBeyond(words []string, n int) bool {
	args := words[1:]
	lits := make([]bool, len(args))
	for i := range lits {
		lits[i] = true
	}
	si, _ := gitSubcommand(args, lits)
	if si >= len(args) {
		return false
	}
	sub, rest := args[si], args[si+1:]
	last := si + 1 // index in words of the last word that names the form
	if gitForms[sub] {
		for i, a := range rest {
			if !strings.HasPrefix(a, "-") {
				last = si + 2 + i
				break
			}
		}
	}
	if last < n {
		return false
	}
	return !gitRepoOnly(sub, rest)
}

// gitForms are git subcommands whose first operand chooses what they do
// (git stash list, git stash pop).
var gitForms = set("bundle", "worktree", "stash", "submodule", "remote", "notes", "reflog", "sparse-checkout", "bisect", "maintenance")

// gitRepoOnlyWrites are git subcommands that write only inside .git (refs,
// the index, objects, configuration) in every form.
var gitRepoOnlyWrites = set("add", "commit", "branch", "tag", "fetch", "push", "remote", "notes", "reflog", "gc", "prune", "repack",
	"update-ref", "symbolic-ref", "hash-object", "update-index", "mktag", "mktree", "write-tree", "commit-tree", "replace", "maintenance",
	"config", "fsck", "pack-refs")

// gitRepoOnly reports whether git sub with the arguments rest changes no
// file outside .git: a form that only reads, a subcommand that only
// writes the repository, or a form of one that can do both that only
// writes the repository (reset without --hard, rm --cached, apply
// --cached). Options are matched as git matches them, abbreviations
// included (--har is --hard).
func gitRepoOnly(sub string, rest []string) bool {
	if gitReads[sub] && gitReadForm(sub, rest) || gitRepoOnlyWrites[sub] {
		return true
	}
	opt := func(opts ...string) bool {
		return slices.ContainsFunc(rest, func(a string) bool {
			k, _, _ := strings.Cut(a, "=")
			return slices.Contains(opts, k) || longOpt(a, opts)
		})
	}
	first := ""
	for _, a := range rest {
		if !strings.HasPrefix(a, "-") {
			first = a
			break
		}
	}
	switch sub {
	case "reset":
		return !opt("--hard", "--merge", "--keep", "--recurse-submodules")
	case "rm":
		return opt("--cached")
	case "apply":
		return (opt("--cached", "--check", "--stat", "--numstat", "--summary")) && !opt("--index", "--3way") && !slices.Contains(rest, "-3")
	case "bundle":
		return first == "verify" || first == "list-heads"
	case "submodule":
		return first == "" || first == "status" || first == "summary" || first == "sync" || first == "absorbgitdirs"
	case "sparse-checkout":
		return first == "list"
	}
	return false
}
