package assemble

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"github.com/keel-run/keel/agent"

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

// maxArtifactBytes bounds an artifact read back for a comparison.
const maxArtifactBytes = 64 << 20

// ReadArtifact reads an artifact (a whole tool output) of the run c
// created from its state directory (or, for older runs, its workspace):
// a regular file of at most 64 MiB (tool.ReadArtifact).
func ReadArtifact(c *agent.RunCreated, rel string) ([]byte, error) {
	ws, err := tool.NewWorkspace(c.Workspace, "", nil)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	if c.StateDir != "" {
		if err := ws.SetState(c.StateDir); err != nil {
			return nil, err
		}
	}
	b, err := tool.ReadArtifact(ws, rel, maxArtifactBytes)
	if err == nil && len(b) > maxArtifactBytes {
		return nil, fmt.Errorf("artifact %s is larger than %d bytes", rel, maxArtifactBytes)
	}
	return b, err
}
