package bash

import (
	"path"
	"strings"
)

// isHome reports whether a path is HOME itself (~, /root), into which a
// copy, a move, a link or an archive puts files named after their
// sources.
func isHome(p string) bool {
	p = path.Clean(p)
	return p == "~" || p == "/root"
}

// homeInto says how a part writes a dotfile into HOME without naming it
// ("" when it does not): a copy, move, install or link of a dotfile or a
// directory into HOME (cp tmpl/.gitconfig ~, cp -t ~ .jq, cp -r home/. ~/,
// mv -t /root x), an archive extracted there (tar -C ~, unzip -d ~, tar
// -x run from HOME). Every later git, jq, curl, pip or shell reads such
// files: configuration a later program reads, as ~/.gitconfig is.
func (l *locator) homeInto(c *Command, f *Facts, cwd string) string {
	name := c.Name()
	if name == "" {
		return ""
	}
	args := c.Args()
	into := false
	for _, w := range f.Written {
		if isHome(w) {
			into = true
		}
	}
	if !into {
		// An archive extracted in HOME, or in a dot directory of it.
		if (name == "tar" || name == "unzip" || name == "cpio" || name == "bsdtar") && treeWriter(name, args) &&
			(isHome(cwd) || homeConfig(cwd)) && !hasOption(args, "-C", "--directory", "-d") {
			return name + " extracts files into " + cwd + ", where later programs read their configuration"
		}
		return ""
	}
	switch name {
	case "cp", "mv", "install", "ln":
		if treeWriter(name, args) {
			return name + " puts files into HOME whose names its words do not show; later programs read their configuration there"
		}
		for i, a := range args {
			if strings.HasPrefix(a, "-") || isHome(a) {
				continue
			}
			if b := path.Base(a); strings.HasPrefix(b, ".") || c.Glob[min(c.Prog+1+i, len(c.Glob)-1)] >= 0 {
				return name + " puts " + a + " into HOME, configuration a later program reads (git, jq, curl, a shell)"
			}
		}
		return ""
	}
	return name + " writes into HOME files whose names its words do not show; later programs read their configuration there"
}
