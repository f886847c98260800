package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/keel-run/keel/internal/realpath"
	"github.com/keel-run/keel/tool"
)

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

// maxPolicyBytes bounds a policy file.
const maxPolicyBytes = 4 << 20

// readPolicyFile reads the policy file p the way Keel reads any file a
// run's workspace may hold (a policy often lives in the repository):
// only a regular file (a FIFO put in its place would block the open
// forever, /dev/zero would never end), opened without blocking, at most
// maxPolicyBytes.
//
// Its errors name p as given (the path the user typed), not the
// directory or base name it opens.
func readPolicyFile(p string) ([]byte, error) {
	named := p
	// The user named this path: symbolic links in it may lead anywhere,
	// as the user chose.
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	root, err := os.OpenRoot(filepath.Dir(p))
	if err != nil {
		return nil, policyFileError(named, err)
	}
	defer root.Close()
	b, err := tool.ReadRegular(root, filepath.Base(p), maxPolicyBytes)
	if err != nil {
		return nil, policyFileError(named, err)
	}
	if len(b) > maxPolicyBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", named, maxPolicyBytes)
	}
	return b, nil
}

// policyFileError is err, from reading the policy file named, as an
// error that names it.
func policyFileError(named string, err error) error {
	if errors.Is(err, tool.ErrNotRegular) {
		// "tool: read NAME: not a regular file (a FIFO)": keep what
		// follows NAME.
		_, why, _ := strings.Cut(err.Error(), ": ")
		_, why, _ = strings.Cut(why, ": ")
		return fmt.Errorf("read %s: %s", named, why)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("read %s: %w", named, pe.Err)
	}
	return fmt.Errorf("read %s: %w", named, err)
}
