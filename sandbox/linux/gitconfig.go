//go:build linux

package linux

import (
	"bytes"
	"fmt"
	"strings"
)

// Git reads a repository's config (config, config.worktree) every time it
// runs, and dozens of its keys name a program to run (core.fsmonitor,
// core.pager, core.sshCommand, alias.*, filter.*, diff.*.textconv,
// remote.*.uploadpack, submodule.*.update, credential.helper, gpg.program
// ...) or another file to read (include.path, includeIf). New keys of
// this kind appear with new git versions. So a config the sandbox wrote
// is judged by an allowlist: it passes only if every key in it is one
// git itself writes when it creates, clones or configures a repository
// and that runs nothing; anything else (or anything this strict reader
// cannot parse the way git would) fails.

// inertKeys are "section.key" entries (no subsection) known to run
// nothing and read no other file.
var inertKeys = setOf(
	"core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
	"core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.worktree",
	"core.autocrlf", "core.safecrlf", "core.eol", "core.quotepath", "core.sparsecheckout",
	"core.sparsecheckoutcone", "core.checkstat", "core.trustctime", "core.untrackedcache",
	"core.splitindex", "core.compression", "core.loosecompression", "core.bigfilethreshold",
	"core.abbrev", "core.whitespace", "core.commitgraph", "core.multipackindex",
	"core.preloadindex", "core.protecthfs", "core.protectntfs",
	"extensions.objectformat", "extensions.worktreeconfig", "extensions.refstorage",
	"extensions.preciousobjects", "extensions.partialclone", "extensions.noop",
	"user.name", "user.email", "init.defaultbranch",
	"pull.rebase", "pull.ff", "push.default", "push.autosetupremote",
	"fetch.prune", "fetch.prunetags", "merge.conflictstyle", "merge.ff",
	"diff.renames", "diff.algorithm", "diff.mnemonicprefix", "diff.noprefix",
	"diff.indentheuristic", "diff.colormoved",
	"status.showuntrackedfiles", "status.short", "status.branch",
	"gc.auto", "gc.autodetach", "gc.autopacklimit", "lfs.repositoryformatversion",
	"rerere.enabled", "rerere.autoupdate", "branch.autosetupmerge", "branch.autosetuprebase",
)

// inertSubKeys are "section.*.key" entries (any subsection) known to be
// inert.
var inertSubKeys = setOf(
	"remote.*.url", "remote.*.pushurl", "remote.*.fetch", "remote.*.push", "remote.*.mirror",
	"remote.*.tagopt", "remote.*.prune", "remote.*.prunetags", "remote.*.promisor",
	"remote.*.partialclonefilter", "remote.*.skipdefaultupdate", "remote.*.skipfetchall",
	"branch.*.remote", "branch.*.merge", "branch.*.rebase", "branch.*.pushremote", "branch.*.description",
	"submodule.*.url", "submodule.*.active", "submodule.*.branch", "submodule.*.ignore",
	"submodule.*.shallow", "submodule.*.fetchrecursesubmodules",
	"lfs.*.access", "lfs.*.locksverify",
)

// inertSections are sections whose every key is inert (colours, advice
// messages), with or without a subsection.
var inertSections = setOf("advice", "color")

// runsProgram names keys known to run a program or read another file,
// for a precise message; the allowlist, not this list, decides.
var runsProgram = setOf(
	"core.fsmonitor", "core.hookspath", "core.pager", "core.editor", "core.sshcommand",
	"core.askpass", "core.gitproxy", "core.alternaterefscommand", "diff.external",
	"sequence.editor", "gpg.program", "credential.helper", "uploadpack.packobjectshook",
	"include.path", "includeif.path", "alias", "filter", "diff.textconv", "diff.command",
	"merge.driver", "remote.uploadpack", "remote.receivepack", "submodule.update",
	"url.insteadof", "url.pushinsteadof", "protocol.allow",
)

func setOf(items ...string) map[string]bool {
	m := make(map[string]bool, len(items))
	for _, s := range items {
		m[s] = true
	}
	return m
}

// configProblem returns why a git config file is not known to be inert
// ("" when every key in it is on the allowlist): a key off the list, or
// a line this reader does not parse exactly as git would (a key on a
// section header line, a value continued onto the next line, a stray
// carriage return or NUL byte, an unterminated quote).
func configProblem(data []byte) string {
	return walkConfig(data, func(section, sub string, hasSub bool, key, _ string) string {
		if !keyInert(section, sub, hasSub, key) {
			return keyProblem(section, sub, hasSub, key)
		}
		return ""
	})
}

// walkConfig parses a git config strictly and calls fn for every key in
// order; it stops at the first problem, of the text or returned by fn.
func walkConfig(data []byte, fn func(section, sub string, hasSub bool, key, value string) string) string {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	section, sub, hasSub := "", "", false
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.ContainsAny(line, "\r\x00") {
			return fmt.Sprintf("line %d has a carriage return or NUL byte that git may read differently", n+1)
		}
		line = strings.TrimLeft(line, " \t")
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			var ok bool
			section, sub, hasSub, ok = parseSectionHeader(line)
			if !ok {
				return fmt.Sprintf("line %d is not a plain section header (git accepts a key after the ']' on the same line)", n+1)
			}
			continue
		}
		key, value, ok := parseKeyLine(line)
		if !ok {
			return fmt.Sprintf("line %d is not a plain 'key = value' line on one line", n+1)
		}
		if section == "" {
			return fmt.Sprintf("line %d sets a key outside any section", n+1)
		}
		if p := fn(section, sub, hasSub, key, value); p != "" {
			return p
		}
	}
	return ""
}

// keyInert reports whether section[.sub].key is on the allowlist.
func keyInert(section, sub string, hasSub bool, key string) bool {
	if inertSections[section] {
		return true
	}
	if hasSub {
		return inertSubKeys[section+".*."+key]
	}
	return inertKeys[section+"."+key]
}

// keyProblem words the refusal of a key.
func keyProblem(section, sub string, hasSub bool, key string) string {
	name := section + "." + key
	if hasSub {
		name = section + "." + sub + "." + key
	}
	switch {
	case runsProgram[section+"."+key], runsProgram[section]:
		return "it sets " + name + ", which makes git run a program or read another file"
	case section == "include" || section == "includeif":
		return "it sets " + name + ", which makes git read another config file"
	}
	return "it sets " + name + ", which is not on Keel's list of git settings known to run nothing"
}

// parseSectionHeader parses "[section]", `[section "sub"]` or the old
// "[section.sub]", with only a comment after the ']', and returns the
// lower-case section and the subsection.
func parseSectionHeader(line string) (section, sub string, hasSub, ok bool) {
	i := 1
	for i < len(line) && (isAlnum(line[i]) || line[i] == '-' || line[i] == '.') {
		i++
	}
	section = strings.ToLower(line[1:i])
	if section == "" {
		return "", "", false, false
	}
	rest := strings.TrimLeft(line[i:], " \t")
	if strings.HasPrefix(rest, `"`) {
		if strings.Contains(section, ".") {
			return "", "", false, false
		}
		var b strings.Builder
		j := 1
		for ; j < len(rest) && rest[j] != '"'; j++ {
			if rest[j] == '\\' {
				j++
				if j == len(rest) {
					return "", "", false, false
				}
			}
			b.WriteByte(rest[j])
		}
		if j >= len(rest) {
			return "", "", false, false
		}
		sub, hasSub = b.String(), true
		rest = rest[j+1:]
	} else if dot := strings.IndexByte(section, '.'); dot >= 0 {
		section, sub, hasSub = section[:dot], section[dot+1:], true
		if section == "" {
			return "", "", false, false
		}
	}
	if !strings.HasPrefix(rest, "]") {
		return "", "", false, false
	}
	rest = strings.TrimLeft(rest[1:], " \t")
	if rest != "" && rest[0] != '#' && rest[0] != ';' {
		return "", "", false, false
	}
	return section, sub, hasSub, true
}

// parseKeyLine parses "key", "key = value" (value on this line only) and
// returns the lower-case key and the value as git decodes it (quotes
// removed, escapes applied, comment and surrounding blanks dropped).
func parseKeyLine(line string) (string, string, bool) {
	i := 0
	for i < len(line) && (isAlnum(line[i]) || (i > 0 && line[i] == '-')) {
		i++
	}
	if i == 0 || !isAlpha(line[0]) {
		return "", "", false
	}
	key := strings.ToLower(line[:i])
	rest := strings.TrimLeft(line[i:], " \t")
	if rest == "" {
		return key, "true", true
	}
	if rest[0] != '=' {
		return "", "", false
	}
	var b strings.Builder
	quoted := false
	pending := "" // blanks outside quotes, kept only if more text follows
	for j := 1; j < len(rest); j++ {
		c := rest[j]
		switch {
		case c == '\\':
			if j == len(rest)-1 {
				return "", "", false // continues onto the next line
			}
			j++
			b.WriteString(pending)
			pending = ""
			switch rest[j] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'b':
				b.WriteByte('\b')
			default:
				b.WriteByte(rest[j])
			}
		case c == '"':
			quoted = !quoted
		case (c == '#' || c == ';') && !quoted:
			return key, b.String(), true
		case (c == ' ' || c == '\t') && !quoted:
			if b.Len() > 0 {
				pending += string(c)
			}
		default:
			b.WriteString(pending)
			pending = ""
			b.WriteByte(c)
		}
	}
	return key, b.String(), !quoted
}

// configIncludes returns the paths a git config includes (include.path
// and every includeIf.<condition>.path), as written, in order; nil when
// the config does not parse (configProblem says why).
func configIncludes(data []byte) []string {
	var out []string
	err := walkConfig(data, func(section, sub string, hasSub bool, key, value string) string {
		if key == "path" && (section == "include" && !hasSub || section == "includeif" && hasSub) {
			out = append(out, value)
		}
		return ""
	})
	if err != "" {
		return nil
	}
	return out
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isAlnum(c byte) bool { return isAlpha(c) || c >= '0' && c <= '9' }
