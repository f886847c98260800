// Package skillhost is Keel's skills on this machine (docs/skills.md):
// the user's skills and the store of installed and approved ones under
// Keel's home directory, the project lockfiles that pin them (trusted
// as the person wrote them), which together are the service's
// SkillHost; the tools with which a run proposes and promotes a skill
// it wrote, the comparison of a candidate with a recorded baseline in
// the Linux sandbox, and the export and import of candidates with their
// evidence and of approved skills. It reads no flags: the command line
// gives it Keel's home and the journal.
package skillhost

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/config"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/skill"
	"github.com/keel-run/keel/tool"
)

// Host is the skills of one Keel home directory, with signatures
// verified against the agent keys of a journal.
type Host struct {
	// Home is Keel's home directory: skills/ (the user's own),
	// skill-store/ (installed and approved ones, NAME/HEX, never
	// changed) and the list of trusted files.
	Home string
	// Store is the journal: the agent keys that verify and make
	// signatures, the candidates stream. nil: signatures are not
	// verified, and the tools are definitions only.
	Store journal.Store
	// OpenVault opens the vault of a journal, whose agent keys sign
	// approved skills.
	OpenVault func(journal.Store) (*credential.Vault, error)
}

// UserDir is the directory of the user's own skills.
func (h *Host) UserDir() string { return filepath.Join(h.Home, "skills") }

// StoreDir is the store of installed and approved skills (NAME/HEX).
func (h *Host) StoreDir() string { return filepath.Join(h.Home, "skill-store") }

// Library is where a run in workspace ws finds its skills, with
// signatures verified against the agent keys of the journal. A
// lockfile counts only when the person trusts its content (keel config
// trust, or a keel skills command that wrote it).
func (h *Host) Library(ws string) *skill.Library {
	lock := filepath.Join(ws, skill.LockFile)
	lib := &skill.Library{UserDir: h.UserDir(), StoreDir: h.StoreDir(), Workspace: ws,
		LockTrusted: func(content []byte) bool { return config.Trusted(h.Home, lock, content) }}
	if rs, ok := h.Store.(journal.Records); ok {
		lib.Key = func(agentName, kid string) (ed25519.PublicKey, error) {
			return credential.AgentPublicKey(context.Background(), rs, agentName, kid)
		}
	}
	return lib
}

// Pin writes p into the lockfile of workspace ws and trusts the new
// content: the person wrote it.
func (h *Host) Pin(ws string, p skill.Pinned) error {
	lock, _, err := skill.ReadLock(ws)
	if err != nil {
		return err
	}
	b, err := lock.Pin(ws, p)
	if err != nil {
		return err
	}
	return config.Trust(h.Home, filepath.Join(ws, skill.LockFile), b)
}

// sign signs sk as version of agent signer's key, approved by the
// person by; hint says how to make the key when there is none.
func (h *Host) sign(ctx context.Context, sk *skill.Skill, signer string, version int, by, hint string) (*skill.Signature, error) {
	v, err := h.OpenVault(h.Store)
	if err != nil {
		return nil, fmt.Errorf("cannot sign: %w", err)
	}
	kid, sig, err := v.SignAsAgent(ctx, signer, skill.SignedMessage(sk.Name, sk.Digest, version, by))
	if err != nil {
		return nil, fmt.Errorf("cannot sign with agent %s's key: %w (%s)", signer, err, hint)
	}
	return &skill.Signature{Agent: signer, KeyID: kid, Version: version, ApprovedBy: by, Sig: base64.StdEncoding.EncodeToString(sig)}, nil
}

// storePinned stores sk, signed s, and pins it in the lockfile of
// workspace ws.
func (h *Host) storePinned(sk *skill.Skill, s *skill.Signature, ws string) (*skill.Skill, error) {
	stored, err := skill.Store(sk, h.StoreDir())
	if err != nil {
		return nil, err
	}
	return stored, h.Pin(ws, skill.Pinned{Name: stored.Name, Digest: stored.Digest, Source: skill.SourceAgent, Signature: s})
}

// AddUseSkill verifies and copies the skills run c was offered into its
// state directory and registers use_skill.
func AddUseSkill(r *tool.Registry, c *agent.RunCreated) {
	if c.Skills == nil || len(c.Skills.Entries) == 0 {
		return
	}
	dest := filepath.Join(c.StateDir, "skills")
	if c.StateDir == "" {
		dest = filepath.Join(os.TempDir(), "keel-skills-unused")
	}
	skill.AddTool(r, c.Skills, skill.Materialize(c.Skills, dest))
}
