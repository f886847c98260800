package assemble

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/keel-run/keel/tool"
)

// Who wrote the workspace's memory files. A memory file (AGENTS.md,
// KEEL.md) is put in a later run's system prompt as the project's own
// instructions, so a run that writes one speaks to every later run in
// the workspace, with their secrets and hosts. Keel notes, in the
// workspace's state directory under Keel's home ([StateDir], which the
// sandbox cannot write), the content of each memory file an agent run left and what that run was:
// who created it, and what untrusted input it had read. A later run that
// finds the file as that run left it loads it as untrusted when the
// writer had read untrusted input or another API token created it (a
// runs:write token writing into the workspace of an admin's schedule).
// The note is made by comparing the files before and after the run's
// calls, so how the file was written does not matter (write_file, a
// shell redirection, python3 -c, tar, unzip, rsync, git).

// provenanceFile is the note, in the workspace's state directory.
const provenanceFile = "memory-writers.json"

// memoryDigestBytes bounds what of a memory file is hashed (far more
// than memory_max_bytes puts in a prompt).
const memoryDigestBytes = 1 << 20

// MemoryWriter is what Keel notes of the run that left a memory file.
type MemoryWriter struct {
	// SHA256 is the digest of the file's first MiB as the run left it.
	SHA256 string `json:"sha256"`
	// Run is the run that wrote it.
	Run string `json:"run"`
	// Creator is the id of the API token that created the run ("" for
	// the command line on the journal's machine).
	Creator string `json:"creator,omitempty"`
	// Untrusted says what first brought untrusted input into the run
	// before it wrote the file ("" when nothing had).
	Untrusted string `json:"untrusted,omitempty"`
}

type provenance struct {
	Files map[string]MemoryWriter `json:"files"`
}

// memoryDigest returns the digest of the memory file name in root, ""
// when it is missing or not a regular file.
func memoryDigest(root *os.Root, name string) string {
	b, err := tool.ReadRegular(root, name, memoryDigestBytes)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func readProvenance(stateDir string) provenance {
	var p provenance
	if b, err := os.ReadFile(filepath.Join(stateDir, provenanceFile)); err == nil {
		_ = json.Unmarshal(b, &p)
	}
	if p.Files == nil {
		p.Files = map[string]MemoryWriter{}
	}
	return p
}

// createdByToken is the label naming the API token that created a run
// (service.LabelCreatedByToken).
const createdByToken = "keel.created_by_token"

// MemoryWatch returns the watch of the memory files of workspace (whose
// state directory is stateDir) for one execution of a run created by the API token creator ("" for the
// command line): each call compares the files with the previous call
// (the first call only looks) and notes a file the run changed, with
// untrusted, what first brought untrusted input into the run so far ("").
// The executor calls it where it checkpoints the workspace and when the
// execution ends (agent.Wiring.MemoryWatch).
func MemoryWatch(stateDir, workspace, creator string) func(run, untrusted string) error {
	var mu sync.Mutex
	var seen map[string]string
	return func(run, untrusted string) error {
		mu.Lock()
		defer mu.Unlock()
		root, err := os.OpenRoot(workspace)
		if err != nil {
			return nil // a workspace that is gone has no memory files
		}
		defer root.Close()
		now := map[string]string{}
		for _, n := range memoryNames {
			now[n] = memoryDigest(root, n)
		}
		first := seen == nil
		old := seen
		seen = now
		if first {
			return nil
		}
		var changed []string
		for _, n := range memoryNames {
			if now[n] != old[n] && now[n] != "" {
				changed = append(changed, n)
			}
		}
		if len(changed) == 0 {
			return nil
		}
		p := readProvenance(stateDir)
		for _, n := range changed {
			p.Files[n] = MemoryWriter{SHA256: now[n], Run: run, Creator: creator, Untrusted: untrusted}
		}
		b, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			return err
		}
		if err := os.MkdirAll(stateDir, 0o755); err != nil {
			return fmt.Errorf("note of memory files' writers: %w", err)
		}
		tmp := filepath.Join(stateDir, provenanceFile+"."+run+".tmp")
		if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("note of memory files' writers: %w", err)
		}
		if err := os.Rename(tmp, filepath.Join(stateDir, provenanceFile)); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("note of memory files' writers: %w", err)
		}
		return nil
	}
}

// memoryDistrust says why the memory file name of the workspace at root
// is untrusted for a run that the API token creator creates: the file is
// as an agent run left it, and that run had read untrusted input, or
// another token created it. "" when it is trusted: not written by an
// agent run (a person's, the repository's), changed since, or written
// by a run of the same creator before any untrusted input.
func memoryDistrust(root *os.Root, p provenance, name, creator string) string {
	w, ok := p.Files[name]
	if !ok || w.SHA256 == "" || memoryDigest(root, name) != w.SHA256 {
		return ""
	}
	switch {
	case w.Untrusted != "":
		return fmt.Sprintf("memory file %s as run %s wrote it after untrusted input (%s)", name, w.Run, w.Untrusted)
	case w.Creator != "" && w.Creator != creator:
		return fmt.Sprintf("memory file %s as run %s wrote it, which another API token (%s) created", name, w.Run, w.Creator)
	}
	return ""
}
