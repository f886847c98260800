package skill

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

// Moving agent-written skills to another journal: [Candidates.Export]
// writes the candidates stream with its hashes (the evidence: proposals,
// tests, comparisons, approvals) and [Bundle] carries an approved skill's
// files with its signature and the public key that made it. On the other
// side [Candidates.Import] adds the evidence, [Bundle.Verify] checks the
// files and the signature, and a person's import signs the skill again
// with that journal's agent key ([Candidates.RecordImport]): a signature
// is only ever verified against the keys of the journal that loads it.

// Export returns the candidates stream's events from the first,
// verified (nil when no candidate was ever proposed).
func (c *Candidates) Export(ctx context.Context, store journal.Store) ([]journal.Event, error) {
	evs, err := store.Read(ctx, StreamID, 1)
	if err != nil {
		if errors.Is(err, journal.ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	if err := journal.Verify(StreamID, evs); err != nil {
		return nil, err
	}
	return evs, nil
}

// ImportResult counts what [Candidates.Import] did.
type ImportResult struct {
	Imported, Skipped int
}

// Import appends the records of an exported candidates stream whose
// candidates this journal does not hold, in their order and unchanged
// (their provenance names the runs of the journal they came from); a
// candidate already here is skipped, so importing twice imports once.
// The export's chain is verified first, and nothing is written if it
// fails.
func (c *Candidates) Import(ctx context.Context, evs []journal.Event) (*ImportResult, error) {
	if err := journal.Verify(StreamID, evs); err != nil {
		return nil, fmt.Errorf("skill: import: %w", err)
	}
	// Fold the export alone first: a stream this keel cannot read is
	// refused before anything is written.
	src := mem.New()
	defer src.Close()
	if _, err := journal.Import(ctx, src, evs); err != nil {
		return nil, fmt.Errorf("skill: import: %w", err)
	}
	from, err := NewCandidates(src, nil).List(ctx)
	if err != nil {
		return nil, fmt.Errorf("skill: import: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.s.Sync(ctx); err != nil {
		return nil, err
	}
	res := &ImportResult{}
	here := map[string]bool{}
	for _, x := range from {
		here[x.ID()] = c.by[x.ID()] != nil
		if here[x.ID()] {
			res.Skipped++
		} else {
			res.Imported++
		}
	}
	for _, e := range evs {
		id, err := eventCandidate(&e)
		if err != nil {
			return res, err
		}
		if here[id] {
			continue
		}
		if _, err := c.s.Append(ctx, e.Type, json.RawMessage(e.Payload), nil); err != nil {
			return res, err
		}
	}
	return res, nil
}

// eventCandidate returns the candidate id an event of the stream is
// about.
func eventCandidate(e *journal.Event) (string, error) {
	var p struct {
		ID     string `json:"id"`
		Name   string `json:"name"`
		Digest string `json:"digest"`
	}
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return "", err
	}
	if e.Type == Proposed {
		return p.Name + "@" + p.Digest, nil
	}
	return p.ID, nil
}

// RecordImport journals that a person imported candidate id, approved
// on another journal, and that Keel signed it with this journal's agent
// key (sig): the candidate must be approved here already (its evidence
// imported).
func (c *Candidates) RecordImport(ctx context.Context, id string, sig *Signature, workspace string) (*Candidate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.s.Append(ctx, Approved, &approvedPayload{ID: id, Signature: sig, Workspace: workspace}, func() error {
		x := c.by[id]
		if x == nil || x.State != StateApproved {
			return fmt.Errorf("skill: no approved candidate %s (its evidence must come with it)", id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c.copy(id), nil
}

// Bundle is an approved skill as an export carries it: its files, the
// signature of the journal it was approved on, and the public key that
// signature verifies with there.
type Bundle struct {
	Name      string            `json:"name"`
	Digest    string            `json:"digest"`
	Signature *Signature        `json:"signature"`
	PublicKey []byte            `json:"public_key"`
	Files     map[string][]byte `json:"files"`
}

// NewBundle reads the approved skill in dir (the store's NAME/HEX),
// which must have digest want, with its signature and public key.
func NewBundle(dir, want string, sig *Signature, key ed25519.PublicKey) (*Bundle, error) {
	s, err := Read(dir)
	if err != nil {
		return nil, err
	}
	if s.Digest != want {
		return nil, refused("skill %s changed: its files have digest %s, it was approved at %s", s.Name, s.Digest, want)
	}
	b := &Bundle{Name: s.Name, Digest: s.Digest, Signature: sig, PublicKey: key, Files: map[string][]byte{}}
	for _, f := range s.Files {
		if b.Files[f.Path], err = s.ReadFile(f.Path); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Verify checks a bundle as it arrived: its files have its digest (and
// the archive rules of [CheckPath] hold) and its signature verifies with
// its public key. It returns the skill written to a new directory under
// tmp (the caller stores it with [Store] and removes tmp).
func (b *Bundle) Verify(tmp string) (*Skill, error) {
	if err := CheckName(b.Name); err != nil {
		return nil, err
	}
	if b.Signature == nil || len(b.PublicKey) != ed25519.PublicKeySize {
		return nil, refused("skill %s comes without a signature and its key", b.Name)
	}
	for p := range b.Files {
		if err := CheckPath(p); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp(tmp, "import-")
	if err != nil {
		return nil, err
	}
	s, err := WriteCandidate(dir, b.Name, b.Files)
	if err != nil {
		return nil, err
	}
	if s.Name != b.Name || s.Digest != b.Digest {
		return nil, refused("skill %s: its files have digest %s, the export says %s", b.Name, s.Digest, b.Digest)
	}
	key := func(agent, kid string) (ed25519.PublicKey, error) {
		if agent != b.Signature.Agent || kid != b.Signature.KeyID {
			return nil, refused("no key %s of agent %s in the export", kid, agent)
		}
		return ed25519.PublicKey(b.PublicKey), nil
	}
	if err := VerifySignature(b.Name, b.Digest, b.Signature, key); err != nil {
		return nil, err
	}
	return s, nil
}
