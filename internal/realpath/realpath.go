// Package realpath is Keel's one path-containment resolver: where a host
// path really leads once symbolic links are followed (also for a path
// that does not exist yet, and through dangling links), and whether one
// path lies within another. The server's workspace and recording
// confinement, the command line's checks that nothing of Keel's lies in a
// workspace, the policy's host-side path analysis (--sandbox none) and
// the sandbox's git guard all decide with it, so that they cannot resolve
// one path in different ways.
package realpath

import (
	"os"
	"path/filepath"
	"strings"
)

// maxLinks bounds the symbolic links followed, as Linux does
// (path_resolution(7)).
const maxLinks = 40

// Resolve returns where the host path p leads: absolute, with every
// symbolic link of its longest existing part resolved (filepath.EvalSymlinks,
// which reads "link/.." as the link target's parent, as the kernel does)
// and the part that does not exist yet appended as written. A dangling
// symbolic link is followed to its target, resolved the same way (SQLite
// creates a database through a link to a file that does not exist yet).
// A relative p is taken relative to the working directory. Resolve does
// only reads; with nothing resolvable it returns p cleaned.
func Resolve(p string) string {
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return filepath.Clean(p)
		}
		p = wd + string(filepath.Separator) + p
	}
	for range maxLinks {
		r, dangling := resolveOnce(p)
		if dangling == "" {
			return r
		}
		p = dangling
	}
	return filepath.Clean(p)
}

// resolveOnce resolves p's longest existing part. If that part ends in a
// dangling symbolic link, it returns instead the path the link leads to
// (with the rest of p appended) as dangling, to be resolved again.
func resolveOnce(p string) (resolved, dangling string) {
	head, rest := p, ""
	for {
		if r, err := filepath.EvalSymlinks(head); err == nil {
			return filepath.Join(r, rest), ""
		}
		if fi, err := os.Lstat(head); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if target, err := os.Readlink(head); err == nil {
				if !filepath.IsAbs(target) {
					target = filepath.Join(filepath.Dir(head), target)
				}
				if rest != "" {
					target += string(filepath.Separator) + rest
				}
				return "", target
			}
		}
		// Split off the last element without cleaning: "link/.." must
		// stay for EvalSymlinks to read as the kernel does.
		i := strings.LastIndexByte(strings.TrimRight(head, "/"), '/')
		if i <= 0 {
			return filepath.Clean(p), ""
		}
		elem := strings.TrimRight(head[i+1:], "/")
		if rest == "" {
			rest = elem
		} else {
			rest = elem + string(filepath.Separator) + rest
		}
		head = head[:i]
	}
}

// Within reports whether the clean absolute path p is dir or lies below
// it (lexically: resolve both first).
func Within(p, dir string) bool {
	_, ok := Rel(dir, p)
	return ok
}

// Rel returns p relative to dir ("." when they are the same) and whether
// p is dir or lies below it; both are clean absolute paths.
func Rel(dir, p string) (string, bool) {
	switch {
	case dir == "/":
		if !strings.HasPrefix(p, "/") {
			return "", false
		}
		if p == "/" {
			return ".", true
		}
		return p[1:], true
	case p == dir:
		return ".", true
	case strings.HasPrefix(p, dir+"/"):
		return p[len(dir)+1:], true
	}
	return "", false
}
