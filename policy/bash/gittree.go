package bash

import (
	"slices"
	"strings"
)

// gitTreeWrite says why a git command writes files of the work tree from
// git's objects or a patch ("" when it does not): the files it writes are
// those of a commit, a stash, the index or a patch, whose names its words
// do not show (git checkout other, git stash pop, git apply p.diff, git
// reset --hard, git cherry-pick...). rest are the words after the
// subcommand. Forms that change only refs, the index or nothing (git
// switch -c new, git stash list, git apply --cached, git read-tree
// without -u, git reset without --hard) do not count.
func gitTreeWrite(sub string, rest []string) string {
	has := func(opts ...string) bool { return hasOption(rest, opts...) }
	// pos are the positional words, the values of opts with a separate
	// value left out.
	pos := func(valued ...string) []string {
		var out []string
		for i := 0; i < len(rest); i++ {
			a := rest[i]
			switch {
			case a == "--":
				return append(out, rest[i+1:]...)
			case slices.Contains(valued, a):
				i++
			case !strings.HasPrefix(a, "-") || a == "-":
				out = append(out, a)
			}
		}
		return out
	}
	first := ""
	if p := pos(); len(p) > 0 {
		first = p[0]
	}
	say := func(from string) string {
		return "git " + sub + " writes files of the work tree from " + from + ", whose names its words do not show"
	}
	switch sub {
	case "checkout":
		// git checkout -b new (no start point) changes no file.
		if len(pos("-b", "-B", "--orphan")) > 0 {
			return say("a commit or the index")
		}
	case "switch":
		if len(pos("-c", "-C", "--create", "--force-create", "--orphan")) > 0 {
			return say("a commit")
		}
	case "restore":
		if !has("--staged", "-S") || has("--worktree", "-W") {
			return say("a commit or the index")
		}
	case "reset":
		if has("--hard", "--merge", "--keep") {
			return say("a commit")
		}
	case "stash":
		switch first {
		case "list", "show", "drop", "clear", "create", "store":
		default:
			// pop, apply, branch write the stash's files; push, save and
			// plain git stash write those of HEAD back.
			return say("a stash or HEAD")
		}
	case "apply":
		if !has("--cached", "--check", "--stat", "--numstat", "--summary") {
			return say("a patch")
		}
	case "am", "cherry-pick", "revert", "merge", "pull", "rebase":
		return say("commits")
	case "read-tree":
		if has("-u", "--reset") {
			return say("a tree")
		}
	case "checkout-index":
		return say("the index")
	case "clone":
		if !has("--bare", "--mirror", "-n", "--no-checkout") {
			return say("the cloned repository")
		}
	case "worktree":
		if first == "add" && !has("--no-checkout") {
			return say("a commit")
		}
	case "submodule":
		if first == "update" || first == "add" {
			return say("the submodule's commits")
		}
	case "bisect":
		switch first {
		case "log", "visualize", "view", "terms", "help", "":
		default:
			return say("the commits it tests")
		}
	case "sparse-checkout":
		if first != "list" && first != "" {
			return say("the index")
		}
	}
	return ""
}
