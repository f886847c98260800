package agent

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"slices"
	"strings"

	"github.com/keel-run/keel/tool"
)

// filesState starts the [ApprovalRequested].State of a call whose tool
// has no [tool.Tool.State] but whose decision names the workspace files
// it writes (a bash command's redirections and the files of programs
// known to write): one line per file, "STATE PATH", where STATE is
// "sha256:HEX" (the first 64 bits), "absent", "dir" or "other".
const filesState = "files\n"

// maxDigest bounds the bytes of one file hashed for a files state; a
// larger file is told by its size and modification time.
const maxDigest = 64 << 20

// writtenRel returns the workspace-relative paths of the files c's
// decision says it writes, sorted, without duplicates.
func (x *executor) writtenRel(c *Call) []string {
	if c.Decision == nil || x.p.Env == nil || x.p.Env.Workspace == nil {
		return nil
	}
	var out []string
	for _, p := range c.Decision.Parts {
		for _, w := range p.Written {
			if rel, err := x.p.Env.Workspace.Rel(w); err == nil && rel != "." {
				out = append(out, rel)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// writtenState returns the files state of c (see filesState) as the
// files are now, "" when its decision names no file it writes.
func (x *executor) writtenState(c *Call) string {
	rels := x.writtenRel(c)
	if len(rels) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(filesState)
	for _, rel := range rels {
		fmt.Fprintf(&b, "%s %s\n", fileDigest(x.p.Env.Workspace, rel), rel)
	}
	return b.String()
}

// fileDigest is the state of one workspace file for a files state.
func fileDigest(ws *tool.Workspace, rel string) string {
	root := ws.FS()
	if root == nil {
		return "other"
	}
	fi, err := root.Stat(rel)
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		return "absent"
	case err != nil:
		return "other"
	case fi.IsDir():
		return "dir"
	case !fi.Mode().IsRegular():
		return "other"
	case fi.Size() > maxDigest:
		return fmt.Sprintf("size:%d:%d", fi.Size(), fi.ModTime().UnixNano())
	}
	f, err := root.Open(rel)
	if err != nil {
		return "other"
	}
	defer f.Close()
	d, err := tool.Digest(f)
	if err != nil {
		return "other"
	}
	return d[:len("sha256:")+16] // the first 64 bits
}

// staleFiles compares a files state recorded when the approval was asked
// with the files now: nil when none changed, else the result of the
// call, which does not run (the approved command would overwrite what a
// person changed meanwhile).
func staleFiles(then, now string) *tool.Result {
	if then == now || now == "" {
		return nil
	}
	was := map[string]string{}
	for _, l := range strings.Split(strings.TrimPrefix(then, filesState), "\n") {
		if st, rel, ok := strings.Cut(l, " "); ok {
			was[rel] = st
		}
	}
	var changed []string
	for _, l := range strings.Split(strings.TrimPrefix(now, filesState), "\n") {
		st, rel, ok := strings.Cut(l, " ")
		if !ok || was[rel] == st {
			continue
		}
		how := "was changed"
		switch {
		case st == "absent":
			how = "was removed"
		case was[rel] == "absent":
			how = "was created"
		}
		changed = append(changed, rel+" "+how)
	}
	if len(changed) == 0 {
		return nil
	}
	return &tool.Result{IsError: true, Content: fmt.Sprintf("not done: %s after this command asked for approval (by a person or another program), so the approved command would overwrite that change. Look at the file again and run a command that fits it now; it will be decided, and asked, again.", strings.Join(changed, ", "))}
}
