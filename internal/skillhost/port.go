package skillhost

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/skill"
)

// An export (keel skills export) is JSON lines: the candidates stream
// (_keel.skills) verified, with its hashes, then one bundleLine per
// approved skill with its files, signature and the signing agent's
// public key.
type bundleLine struct {
	Skill *skill.Bundle `json:"skill"`
}

// Export writes the host's export to w. Each approved skill that cannot
// be bundled (its key or files are gone) is left out and said in left.
func (h *Host) Export(ctx context.Context, w io.Writer) (left []error, err error) {
	cands := skill.NewCandidates(h.Store, nil)
	evs, err := cands.Export(ctx, h.Store)
	if err != nil {
		return nil, err
	}
	list, err := cands.List(ctx)
	if err != nil {
		return nil, err
	}
	var bundles []bundleLine
	for _, c := range list {
		if c.State != skill.StateApproved || c.Approval == nil {
			continue
		}
		rs, ok := h.Store.(journal.Records)
		if !ok {
			return nil, errors.New("this journal keeps no agent keys")
		}
		key, err := credential.AgentPublicKey(ctx, rs, c.Approval.Agent, c.Approval.KeyID)
		if err != nil {
			left = append(left, fmt.Errorf("skill %s is left out: %w", c.ID(), err))
			continue
		}
		b, err := skill.NewBundle(filepath.Join(h.StoreDir(), c.Name, strings.TrimPrefix(c.Digest, "sha256:")), c.Digest, c.Approval, key)
		if err != nil {
			left = append(left, fmt.Errorf("skill %s is left out: %w", c.ID(), err))
			continue
		}
		bundles = append(bundles, bundleLine{b})
	}
	enc := json.NewEncoder(w)
	for _, e := range evs {
		if err := enc.Encode(e); err != nil {
			return nil, err
		}
	}
	for _, b := range bundles {
		if err := enc.Encode(b); err != nil {
			return nil, err
		}
	}
	return left, nil
}

// Imported is one approved skill of an export, imported.
type Imported struct {
	Skill   *skill.Skill
	Version int
	// ExportedBy approved it where it was exported; Signer signed it
	// here for By.
	ExportedBy, Signer, By string
	Lockfile               string
}

// ImportResult is what Import did.
type ImportResult struct {
	skill.ImportResult
	Skills []Imported
	// Failed are the approved skills that were not imported, and why.
	Failed []error
}

// An Export is a read export: the candidates stream's events and the
// approved skills.
type Export struct {
	events  []journal.Event
	bundles []*skill.Bundle
}

// Import adds export x to the host: it verifies the candidates
// stream's chain and adds the candidates this journal does not hold
// (their evidence, unchanged); then, for each approved skill, it checks
// its files against its digest and its signature against the exported
// key, stores it, signs it with this journal's key of the same agent
// (signer, if not "") as approved by the person by, pins it in the
// lockfile of workspace ws and journals the approval. Nothing is stored
// if the export's chain does not verify.
func (h *Host) Import(ctx context.Context, x *Export, ws, by, signer string) (*ImportResult, error) {
	evs, bundles := x.events, x.bundles
	cands := skill.NewCandidates(h.Store, nil)
	res := &ImportResult{}
	if len(evs) > 0 {
		r, err := cands.Import(ctx, evs)
		if err != nil {
			return nil, err
		}
		res.ImportResult = *r
	}
	tmp, err := os.MkdirTemp("", "keel-skills-import-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for _, b := range bundles {
		im, err := h.importSkill(ctx, cands, b, tmp, ws, by, signer)
		if err != nil {
			res.Failed = append(res.Failed, fmt.Errorf("skill %s is not imported: %w", b.Name, err))
			continue
		}
		res.Skills = append(res.Skills, *im)
	}
	return res, nil
}

// importSkill verifies, stores, signs and pins one exported skill.
func (h *Host) importSkill(ctx context.Context, cands *skill.Candidates, b *skill.Bundle, tmp, ws, by, signer string) (*Imported, error) {
	sk, err := b.Verify(tmp)
	if err != nil {
		return nil, err
	}
	id := b.Name + "@" + b.Digest
	c, err := cands.Find(ctx, id)
	if err != nil || c.State != skill.StateApproved {
		return nil, fmt.Errorf("the export holds no approved candidate %s: a skill comes only with its evidence", id)
	}
	if signer == "" {
		signer = b.Signature.Agent
	}
	s, err := h.sign(ctx, sk, signer, b.Signature.Version, by, "keel agents create "+signer+", or --agent")
	if err != nil {
		return nil, err
	}
	stored, err := h.storePinned(sk, s, ws)
	if err != nil {
		return nil, err
	}
	if _, err := cands.RecordImport(ctx, id, s, ws); err != nil {
		return nil, err
	}
	return &Imported{Skill: stored, Version: s.Version, ExportedBy: b.Signature.ApprovedBy, Signer: signer, By: by, Lockfile: filepath.Join(ws, skill.LockFile)}, nil
}

// ReadExport reads the export in file name; what is no export is a
// *service.Error of code invalid_request.
func ReadExport(name string) (*Export, error) {
	evs, bundles, err := readExport(name)
	if err != nil {
		return nil, invalid(err)
	}
	return &Export{evs, bundles}, nil
}

func readExport(name string) ([]journal.Event, []*skill.Bundle, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var events bytes.Buffer
	var bundles []*skill.Bundle
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte(`{"skill":`)) {
			var b bundleLine
			if err := json.Unmarshal(line, &b); err != nil || b.Skill == nil {
				return nil, nil, fmt.Errorf("%s:%d: not a skill: %v (nothing was stored)", name, n, err)
			}
			bundles = append(bundles, b.Skill)
			continue
		}
		events.Write(line)
		events.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if events.Len() == 0 {
		return nil, bundles, nil
	}
	evs, torn, err := journal.ReadJSONL(&events)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w (nothing was stored)", name, err)
	}
	if torn != nil {
		return nil, nil, fmt.Errorf("%s: %s: the export was cut short; export again (nothing was stored)", name, torn)
	}
	return evs, bundles, nil
}
