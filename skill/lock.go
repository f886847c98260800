package skill

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// LockFile is a project's lockfile, relative to its workspace: the
// skills the project uses, each pinned by digest. It lives under .keel/,
// which no run may write.
const LockFile = ".keel/skills.lock"

// Sources of a skill.
const (
	SourceUser    = "user"    // the user's skill directory
	SourceProject = "project" // the project's .keel/skills
	SourceIndex   = "index"   // installed from a discovery index
	SourceAgent   = "agent"   // written by an agent, promoted on evidence
)

// Lock is a project's pinned skills.
type Lock struct {
	Version int      `json:"version"`
	Skills  []Pinned `json:"skills"`
}

// Pinned is one skill of a lockfile.
type Pinned struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	Source string `json:"source"`
	// URL is the index a SourceIndex skill was installed from.
	URL string `json:"url,omitempty"`
	// Scripts records that a person allowed the skill's scripts to run
	// when installing or approving it (policies see it as
	// resource.approved).
	Scripts bool `json:"scripts,omitempty"`
	// Signature is set for skills Keel signed (agent-written skills a
	// person approved).
	Signature *Signature `json:"signature,omitempty"`
}

// Signature is Keel's signature of a skill: an agent's Ed25519 key
// over [SignedMessage].
type Signature struct {
	// Agent and KeyID name the signing key (credential.AgentPublicKey).
	Agent string `json:"agent"`
	KeyID string `json:"kid"`
	// Version numbers the skill's approved versions (1, 2, ...).
	Version int `json:"version"`
	// ApprovedBy is the person who approved it.
	ApprovedBy string `json:"approved_by"`
	// Sig is the base64 signature.
	Sig string `json:"sig"`
}

// SignedMessage is what a [Signature] signs: the skill's name, digest,
// version and approver, so that none can be changed without the
// signature failing.
func SignedMessage(name, digest string, version int, approvedBy string) []byte {
	return fmt.Appendf(nil, "keel-skill-v1\n%s\n%s\n%d\n%s\n", name, digest, version, approvedBy)
}

// KeyFunc returns the public key kid of agent, or an error.
type KeyFunc func(agent, kid string) (ed25519.PublicKey, error)

// VerifySignature checks sig for the skill name at digest.
func VerifySignature(name, digest string, sig *Signature, key KeyFunc) error {
	if sig == nil {
		return refused("skill %s is not signed", name)
	}
	pub, err := key(sig.Agent, sig.KeyID)
	if err != nil {
		return refused("skill %s: signing key %s of %s: %v", name, sig.KeyID, sig.Agent, err)
	}
	raw, err := base64.StdEncoding.DecodeString(sig.Sig)
	if err != nil || !ed25519.Verify(pub, SignedMessage(name, digest, sig.Version, sig.ApprovedBy), raw) {
		return refused("skill %s: the signature does not match its content (digest %s)", name, digest)
	}
	return nil
}

// ReadLock reads the lockfile of workspace; a missing one is empty.
func ReadLock(workspace string) (*Lock, []byte, error) {
	b, err := os.ReadFile(filepath.Join(workspace, LockFile))
	if errors.Is(err, fs.ErrNotExist) {
		return &Lock{Version: 1}, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var l Lock
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, nil, fmt.Errorf("skill: %s: %w", LockFile, err)
	}
	if l.Version != 1 {
		return nil, nil, fmt.Errorf("skill: %s has version %d, this keel reads 1", LockFile, l.Version)
	}
	return &l, b, nil
}

// Pin sets p in the lock (replacing a pin of the same name) and writes
// it to workspace, returning the new content.
func (l *Lock) Pin(workspace string, p Pinned) ([]byte, error) {
	l.Skills = slices.DeleteFunc(l.Skills, func(x Pinned) bool { return x.Name == p.Name })
	l.Skills = append(l.Skills, p)
	slices.SortFunc(l.Skills, func(a, b Pinned) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	path := filepath.Join(workspace, LockFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return b, os.WriteFile(path, b, 0o644)
}
