package policy

import (
	"errors"
	"path"
	"slices"
	"strings"
)

// PolicyPaths is the policy id of parts denied because they name a path
// of the policy's [paths] deny list.
const PolicyPaths = "keel.paths"

// denyPath cleans one entry of [paths] deny: a workspace-relative path
// ("secrets", ".env", ".git"), or an absolute one ("/etc/ssl/private").
func denyPath(p string) (string, error) {
	p = strings.TrimSpace(p)
	switch {
	case p == "":
		return "", errors.New("empty")
	case p == "~" || strings.HasPrefix(p, "~"):
		return "", errors.New("a home directory path is not supported: in the sandbox HOME is private, and without one name the absolute path")
	case strings.HasPrefix(p, "/"):
		c := path.Clean(p)
		if c == "/" {
			return "", errors.New("the whole file system cannot be denied")
		}
		return c, nil
	}
	c := path.Clean(p)
	if c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", errors.New("want a path inside the workspace, or an absolute path")
	}
	return c, nil
}

// DeniedPaths returns the policy's [paths] deny list: workspace-relative
// paths (no leading slash) and absolute host paths, cleaned. The gate
// denies every part that names one of them or a path below it (policy
// id "keel.paths", whatever the Cedar rules say); the runtime also hides
// them from the run: the Linux sandbox masks them, and the file tools
// refuse and skip them (see docs/policy.md).
func (e *Engine) DeniedPaths() []string { return slices.Clone(e.deny) }

// deniedHit returns the first denied path (as the policy file names it)
// that part r reads or writes, at it or below it, or "". A part that
// reads a directory above a denied path (grep -r x .) is not denied: the
// sandbox hides the path from it. Git's REV:PATH arguments (git show
// HEAD:secrets/key) name a path of the repository's tree.
func (e *Engine) deniedHit(r *request) string {
	if len(e.deny) == 0 {
		return ""
	}
	abs := func(d string) string {
		if strings.HasPrefix(d, "/") {
			return d
		}
		return path.Join(r.mount, d)
	}
	paths := append(append([]string(nil), r.facts.Reads...), r.facts.Written...)
	if path.Base(r.part.Command) == "git" {
		for _, w := range r.part.Words[min(1, len(r.part.Words)):] {
			if _, rel, ok := strings.Cut(w, ":"); ok && !strings.HasPrefix(w, "-") && !strings.Contains(w, "://") && rel != "" {
				paths = append(paths, path.Join(r.mount, strings.TrimPrefix(rel, "./")))
			}
		}
	}
	for _, d := range e.deny {
		a := abs(d)
		for _, p := range paths {
			if p == a || strings.HasPrefix(p, a+"/") {
				return d
			}
		}
		// Words holds literal words only: a REV:PATH whose revision is
		// computed (git show $(git rev-parse HEAD):secrets/key) is found
		// in the part's text.
		if path.Base(r.part.Command) == "git" && !strings.HasPrefix(d, "/") && gitTreePath(r.part.Text, d) {
			return d
		}
	}
	return ""
}

// gitTreePath reports whether text names rel (a path relative to the
// repository's top) as the PATH of a git REV:PATH argument: ":" then rel,
// optionally after "./", followed by "/", a quote, a space or the end.
func gitTreePath(text, rel string) bool {
	rel = strings.TrimPrefix(path.Clean(rel), "./")
	for _, pre := range []string{":" + rel, ":./" + rel} {
		for i := 0; ; {
			j := strings.Index(text[i:], pre)
			if j < 0 {
				break
			}
			end := i + j + len(pre)
			if end == len(text) || strings.IndexByte("/'\" \t\n)", text[end]) >= 0 {
				return true
			}
			i = end
		}
	}
	return false
}
