package assemble

import (
	"os"
	"path/filepath"
	"syscall"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/realpath"
)

// CheckWorkspace refuses a workspace that holds the journal or Keel's
// directory (see checkJournalOutside and checkHomeOutside): Assemble
// checks it too, and a command that opens the journal before it wires
// the run checks it first, so that a refused command leaves nothing in
// the workspace.
func (a *Assembler) CheckWorkspace(ws string) error {
	// Keel's directory first: it holds the default journal, so moving
	// it is the advice that fixes both.
	if err := checkHomeOutside(a.Home, ws); err != nil {
		return err
	}
	return checkJournalOutside(a.Journal, ws)
}

// checkHomeOutside refuses a run whose workspace would let the agent
// change Keel's own configuration, as checkJournalOutside does for the
// journal: the Keel directory (KEEL_HOME, ~/.keel: config.toml, which can
// turn the sandbox off for the next run, the server token, memory files
// and the default journal) inside the workspace, or config.toml or the
// server token leading into it through a symbolic link or sharing its
// inode with another hard link on the workspace's file system. With the
// linux sandbox the workspace is the only host directory commands can
// write; with --sandbox none nothing is protected.
func checkHomeOutside(home, workspace string) error {
	ws := realpath.Resolve(workspace)
	if realpath.Within(realpath.Resolve(home), ws) {
		return usagef("Keel's directory %s (KEEL_HOME) is inside the workspace %s, where the agent's commands could change its config.toml (for example to turn the sandbox off) and read its server token; set KEEL_HOME to a directory outside the workspace", home, workspace)
	}
	var wsDev uint64
	if fi, err := os.Stat(ws); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			wsDev = uint64(st.Dev)
		}
	}
	for _, name := range []string{"config.toml", "server-token"} {
		p := filepath.Join(home, name)
		if realpath.Within(realpath.Resolve(p), ws) {
			return usagef("%s leads into the workspace %s (a symbolic link to %s), where the agent's commands could change it; replace it with a file outside the workspace", p, workspace, realpath.Resolve(p))
		}
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 && uint64(st.Dev) == wsDev {
			return usagef("%s has %d hard links on the file system of the workspace %s, so one of them may be inside it, where the agent's commands could change it; replace it with a file of its own (cp %s %s.new && mv %s.new %s)", p, st.Nlink, workspace, p, p, p, p)
		}
	}
	return nil
}

// checkJournalOutside refuses a journal database inside the run's
// workspace: the workspace is writable from the sandbox, and nothing
// inside it may change the journal, the approvals or the policy. The
// database and the files SQLite and Keel keep beside it (-wal, -shm,
// -journal, .locks) are checked with symbolic links followed, dangling
// ones too, and a database with another hard link on the workspace's file
// system is refused (the link may be inside it).
func checkJournalOutside(db, workspace string) error {
	ws := realpath.Resolve(workspace)
	if realpath.Within(realpath.Resolve(db), ws) {
		return usagef("the journal %s is inside the workspace %s, where the agent's commands could change it; pass --db with a path outside the workspace", db, workspace)
	}
	for _, suffix := range []string{"", "-wal", "-shm", "-journal", ".locks"} {
		p := db + suffix
		if r := realpath.Resolve(p); realpath.Within(r, ws) {
			return usagef("%s leads into the workspace %s (a symbolic link to %s), where the agent's commands could change the journal; pass --db with a path outside the workspace", p, workspace, r)
		}
	}
	var wsDev uint64
	if fi, err := os.Stat(ws); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			wsDev = uint64(st.Dev)
		}
	}
	if fi, err := os.Stat(db); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 && uint64(st.Dev) == wsDev {
			return usagef("the journal %s has %d hard links on the file system of the workspace %s, so one of them may be inside it, where the agent's commands could change it; give it a file of its own (copy it while no run uses it)", db, st.Nlink, workspace)
		}
	}
	return nil
}

// deniedPaths returns the [paths] deny list of the run's policy: the
// sandbox masks these paths and the file tools refuse them, so that the
// policy holds on routes the gate cannot see (grep -r, tar, python).
func deniedPaths(c *agent.RunCreated) ([]string, error) { return agent.DeniedPaths(c) }

// protectedPaths returns the workspace-relative paths that must stay
// read-only for the run: its policy file, when it lies in the workspace.
func protectedPaths(c *agent.RunCreated) []string {
	if c.Policy == nil || !filepath.IsAbs(c.Policy.Name) {
		return nil
	}
	ws, p := realpath.Resolve(c.Workspace), realpath.Resolve(c.Policy.Name)
	if !realpath.Within(p, ws) {
		return nil
	}
	rel, err := filepath.Rel(ws, p)
	if err != nil || rel == "." {
		return nil
	}
	return []string{filepath.ToSlash(rel)}
}
