//go:build linux

package linux

import (
	"bytes"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
)

// refusalErrors are the errors a write to a protected path gets inside
// the sandbox: a file is a read-only bind mount, so replacing it by
// rename (as git writes its config, through a lock file) fails with
// EBUSY, and writing it in place with EROFS.
var refusalErrors = []string{"Device or resource busy", "Read-only file system"}

// refusals watches a command's output for a write refused on one of the
// protected paths, so that Keel can say why afterwards: the programs'
// own messages ("could not write config file .git/config: Device or
// resource busy") do not. It passes everything through to w.
type refusals struct {
	w         io.Writer
	protected []string // workspace-relative, cleaned
	mount     string

	mu    sync.Mutex
	line  []byte // the unfinished line, bounded
	found []string
}

func (r *refusals) Write(p []byte) (int, error) {
	r.mu.Lock()
	for _, b := range p {
		if b == '\n' {
			r.scan()
			r.line = r.line[:0]
			continue
		}
		if len(r.line) < 4096 {
			r.line = append(r.line, b)
		}
	}
	r.mu.Unlock()
	if r.w == nil {
		return len(p), nil
	}
	return r.w.Write(p)
}

// scan looks at one line for a refused protected path.
func (r *refusals) scan() {
	if !slices.ContainsFunc(refusalErrors, func(e string) bool { return bytes.Contains(r.line, []byte(e)) }) {
		return
	}
	for _, p := range r.protected {
		if slices.Contains(r.found, p) {
			continue
		}
		if bytes.Contains(r.line, []byte(path.Join(r.mount, p))) || bytes.Contains(r.line, []byte(" "+p)) || bytes.Contains(r.line, []byte("'"+p)) || bytes.HasPrefix(r.line, []byte(p)) {
			r.found = append(r.found, p)
		}
	}
}

// explain writes, once per protected path a command's output showed a
// refused write on, why the sandbox refused it.
func explainRefusals(w io.Writer, rs ...*refusals) {
	var found []string
	for _, r := range rs {
		if r == nil {
			continue
		}
		r.mu.Lock()
		r.scan() // a last line without a newline
		for _, p := range r.found {
			if !slices.Contains(found, p) {
				found = append(found, p)
			}
		}
		r.mu.Unlock()
	}
	if w == nil {
		return
	}
	for _, p := range found {
		fmt.Fprintln(w, refusalNote(p))
	}
}

// refusalNote says why a write to protected path p failed.
func refusalNote(p string) string {
	switch {
	case p == ".git/config" || strings.HasSuffix(p, "/.git/config"):
		return "keel: " + p + " is read-only in the sandbox, so this write to it failed (\"Device or resource busy\" is how such a write fails): a git config can make the host's git run programs (core.fsmonitor, core.hooksPath, aliases), so Keel protects the repository's own config. The rest of the git command may have happened without it (after `git submodule add`, the submodule is not initialized: a person runs `git submodule init` on the host). For one command, use `git -c key=value ...`; a person can change the config on the host."
	case p == ".git/hooks" || strings.HasSuffix(p, "/.git/hooks"):
		return "keel: " + p + " is read-only in the sandbox, so this write failed: a git hook would run on the host the next time a person uses git. A person can add hooks on the host."
	case p == ".keel":
		return "keel: .keel/ is read-only in the sandbox, so this write failed: it holds Keel's settings for this project and files the git guard quarantined."
	}
	return "keel: " + p + " is read-only in the sandbox (protected by this run's settings), so this write failed."
}
