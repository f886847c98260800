package tool

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Keel's own files for a workspace (whole outputs, kernel records) live
// outside it, in a state directory the caller names (internal/cli uses
// one under Keel's home per workspace; see [Workspace.SetState]), so that
// nothing of Keel's shows in the user's repository: `git status`, `git
// add -A` and search_files never see them. Sandboxes show the directory
// read-only at the same path, so a model reads a whole output at the path
// its result names. A workspace without a state directory (journals
// written before it existed, library users) keeps them in its protected
// .keel directory as before.

// StateArtifacts is the state directory's subdirectory of whole outputs,
// one directory per run.
const StateArtifacts = "artifacts"

// SetState makes dir (a host directory outside the workspace; created
// with its parents if missing) where Keel keeps its own files for runs
// in this workspace. It must be called before the workspace is used.
func (w *Workspace) SetState(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("tool: state directory %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fmt.Errorf("tool: state directory: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("tool: state directory: %w", err)
	}
	if real == w.root || strings.HasPrefix(real, w.root+string(filepath.Separator)) || strings.HasPrefix(w.root, real+string(filepath.Separator)) {
		return fmt.Errorf("tool: state directory %s overlaps the workspace %s", real, w.root)
	}
	r, err := os.OpenRoot(real)
	if err != nil {
		return fmt.Errorf("tool: state directory: %w", err)
	}
	if w.state != nil {
		w.state.Close()
	}
	w.state, w.stateDir = r, real
	return nil
}

// StateDir returns the state directory's real host path ("" without one).
func (w *Workspace) StateDir() string { return w.stateDir }

// State returns the state directory as an [os.Root] (nil without one).
func (w *Workspace) State() *os.Root { return w.state }

// StateRel maps p, a path a tool or a model names, to its slash path in
// the state directory when it lies there (an artifact named in a result),
// and reports whether it does.
func (w *Workspace) StateRel(p string) (string, bool) {
	if w.stateDir == "" || !path.IsAbs(p) {
		return "", false
	}
	c := path.Clean(p)
	rel, ok := strings.CutPrefix(c, w.stateDir+"/")
	if !ok || rel == "" || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// ReadArtifact reads the artifact name (as [Output.Artifact] or
// [WriteArtifact] returned it: a path in the state directory, or a
// workspace-relative one under .keel/artifacts in journals written before
// state directories) as [ReadRegular] does, at most max+1 bytes.
func ReadArtifact(ws *Workspace, name string, max int64) ([]byte, error) {
	if ws == nil {
		return nil, errNoWorkspace
	}
	if rel, ok := ws.StateRel(name); ok {
		return ReadRegular(ws.state, rel, max)
	}
	if path.IsAbs(name) {
		return nil, fmt.Errorf("tool: artifact %s: %w", name, errors.New("not in this workspace's state directory"))
	}
	return ReadRegular(ws.FS(), name, max)
}

// removeArtifact removes the artifact name of ws (see [ReadArtifact]).
func removeArtifact(ws *Workspace, name string) {
	if rel, ok := ws.StateRel(name); ok {
		ws.state.Remove(rel)
		return
	}
	ws.FS().Remove(name)
}

// ArtifactRel is [Workspace.StateRel] for the state directory's whole
// outputs only (what read-only file tools may read there).
func (w *Workspace) ArtifactRel(p string) (string, bool) {
	rel, ok := w.StateRel(p)
	if !ok || !strings.HasPrefix(rel, StateArtifacts+"/") {
		return "", false
	}
	return rel, true
}

// HideInArtifact rewrites the artifact name of ws (see [ReadArtifact])
// through hide (a run's secret redaction), so that the whole output of a
// call holds no more than its result may: the result is redacted, and
// the file it names is read by the model, printed by `runs show --full`
// and served by the API. An artifact over max bytes, which cannot be
// rewritten in memory, is removed; kept is false then.
func HideInArtifact(ws *Workspace, name string, hide func(string) string, max int64) (kept bool, err error) {
	data, err := ReadArtifact(ws, name, max)
	if err != nil {
		removeArtifact(ws, name)
		return false, err
	}
	if int64(len(data)) > max {
		removeArtifact(ws, name)
		return false, nil
	}
	s := hide(string(data))
	if s == string(data) {
		return true, nil
	}
	rel, ok := ws.StateRel(name)
	if !ok {
		// A workspace artifact of an older journal: not rewritten in
		// the workspace, removed.
		removeArtifact(ws, name)
		return false, nil
	}
	f, err := ws.state.OpenFile(rel, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		removeArtifact(ws, name)
		return false, err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		removeArtifact(ws, name)
		return false, err
	}
	if err := f.Close(); err != nil {
		removeArtifact(ws, name)
		return false, err
	}
	return true, nil
}
