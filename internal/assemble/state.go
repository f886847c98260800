package assemble

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"

	"github.com/keel-run/keel/tool"
)

// StateDir returns the directory of Keel's own files for runs in the
// workspace ws (a real, absolute path): whole outputs and kernel records,
// under Keel's home, one directory per workspace, so that nothing of
// Keel's is in the user's workspace (docs/sandbox.md, "Keel's state").
// The name is the workspace's base name and a hash of its path.
func StateDir(home, ws string) string {
	if real, err := filepath.EvalSymlinks(ws); err == nil {
		ws = real
	}
	sum := sha256.Sum256([]byte(ws))
	return filepath.Join(home, "state", tool.SafeName(filepath.Base(ws), "workspace")+"-"+hex.EncodeToString(sum[:8]))
}
