package skill

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/keel-run/keel/journal"
)

// StreamID is the system stream of agent-written skill candidates: what
// was proposed, tested, evaluated, approved or rejected, with evidence.
const StreamID = journal.SystemPrefix + "skills"

// Event types of the candidates stream.
const (
	Proposed  journal.Type = "skill.proposed"
	Tested    journal.Type = "skill.tested"
	Evaluated journal.Type = "skill.evaluated"
	Approved  journal.Type = "skill.approved"
	Rejected  journal.Type = "skill.rejected"
)

// Candidate states, in the order a skill goes through them.
const (
	StateProposed  = "proposed"
	StateFailed    = "failed"    // its tests failed: never offered
	StateTested    = "tested"    // its tests passed
	StateRejected  = "rejected"  // it did not beat the baseline (kept with its numbers)
	StateEvaluated = "evaluated" // it beat the baseline: a person may approve it
	StateApproved  = "approved"  // signed, stored and pinned
)

// TestCase is one of a candidate's tests: a command run in the sandbox
// with the candidate's files at $SKILL_DIR; exit 0 passes.
type TestCase struct {
	Name    string `json:"name"`
	Command string `json:"command"`
}

// TestResult is one test's outcome.
type TestResult struct {
	Name     string `json:"name"`
	ExitCode int    `json:"exit_code"`
	Output   string `json:"output"`
}

// Candidate is an agent-written skill on its way to approval.
type Candidate struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	// Dir holds its files (the candidates store, NAME/HEX).
	Dir string `json:"dir"`
	// Run, Call and Agent name where it was proposed.
	Run   string     `json:"run,omitempty"`
	Call  string     `json:"call,omitempty"`
	Agent string     `json:"agent,omitempty"`
	Tests []TestCase `json:"tests"`
	// Covers is a regular expression of the commands the skill replaces,
	// which the comparison takes from a recorded case as its baseline.
	Covers string `json:"covers,omitempty"`
	// Usage are the commands an agent following the skill runs (the
	// comparison's other arm); its tests' commands when empty.
	Usage []string `json:"usage,omitempty"`

	State      string       `json:"state"`
	Results    []TestResult `json:"results,omitempty"`
	Comparison *Comparison  `json:"comparison,omitempty"`
	Approval   *Signature   `json:"approval,omitempty"`
	Reason     string       `json:"reason,omitempty"`
}

// ID names a candidate: NAME@DIGEST.
func (c *Candidate) ID() string { return c.Name + "@" + c.Digest }

type testedPayload struct {
	ID      string       `json:"id"`
	Passed  bool         `json:"passed"`
	Results []TestResult `json:"results"`
}

type evaluatedPayload struct {
	ID         string      `json:"id"`
	Comparison *Comparison `json:"comparison"`
}

type approvedPayload struct {
	ID        string     `json:"id"`
	Signature *Signature `json:"signature"`
	Workspace string     `json:"workspace,omitempty"`
}

type rejectedPayload struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// Candidates are the skill candidates of one journal, folded from
// [StreamID]. Safe for concurrent use; several processes may share it.
type Candidates struct {
	s  *journal.Stream
	mu sync.Mutex
	by map[string]*Candidate
	// order is the ids in proposal order.
	order []string
}

// NewCandidates returns the candidates kept in store.
func NewCandidates(store journal.Store, clock journal.Clock) *Candidates {
	c := &Candidates{by: map[string]*Candidate{}}
	c.s = journal.NewStream(store, StreamID, clock, c.apply)
	return c
}

func (c *Candidates) apply(e *journal.Event) error {
	get := func(id string) (*Candidate, error) {
		if x := c.by[id]; x != nil {
			return x, nil
		}
		return nil, fmt.Errorf("%s of unknown candidate %q", e.Type, id)
	}
	switch e.Type {
	case Proposed:
		var p Candidate
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		if c.by[p.ID()] != nil {
			return nil // proposed again: the same content, the same candidate
		}
		p.State = StateProposed
		c.by[p.ID()] = &p
		c.order = append(c.order, p.ID())
	case Tested:
		var p testedPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		x, err := get(p.ID)
		if err != nil {
			return err
		}
		x.Results = p.Results
		x.State = StateFailed
		if p.Passed {
			x.State = StateTested
		}
	case Evaluated:
		var p evaluatedPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		x, err := get(p.ID)
		if err != nil {
			return err
		}
		x.Comparison = p.Comparison
		x.State = StateRejected
		if p.Comparison != nil && p.Comparison.Beats {
			x.State = StateEvaluated
		}
	case Approved:
		var p approvedPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		x, err := get(p.ID)
		if err != nil {
			return err
		}
		x.Approval, x.State = p.Signature, StateApproved
	case Rejected:
		var p rejectedPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		x, err := get(p.ID)
		if err != nil {
			return err
		}
		x.State, x.Reason = StateRejected, p.Reason
	default:
		return fmt.Errorf("unknown event type %s in the skills stream", e.Type)
	}
	return nil
}

// Propose journals a candidate (state proposed); proposing the same
// content again returns the existing candidate.
func (c *Candidates) Propose(ctx context.Context, x *Candidate) (*Candidate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.s.Append(ctx, Proposed, x, nil); err != nil {
		return nil, err
	}
	return c.copy(x.ID()), nil
}

func (c *Candidates) copy(id string) *Candidate {
	x := *c.by[id]
	return &x
}

// Record journals a test result, a comparison, an approval or a
// rejection of candidate id, checking the state it moves from: tests
// only of a proposed candidate, a comparison only of a tested one, an
// approval only of an evaluated one.
func (c *Candidates) Record(ctx context.Context, t journal.Type, v any) (*Candidate, error) {
	var id, from string
	switch p := v.(type) {
	case *testedPayload:
		id, from = p.ID, StateProposed
	case *evaluatedPayload:
		id, from = p.ID, StateTested
	case *approvedPayload:
		id, from = p.ID, StateEvaluated
	case *rejectedPayload:
		id = p.ID
	default:
		return nil, fmt.Errorf("skill: record %T", v)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.s.Append(ctx, t, v, func() error {
		x := c.by[id]
		if x == nil {
			return fmt.Errorf("skill: no candidate %s", id)
		}
		if from != "" && x.State != from {
			return fmt.Errorf("skill: candidate %s is %s; %s needs it %s", id, x.State, t, from)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c.copy(id), nil
}

// RecordTests journals the results of a candidate's tests.
func (c *Candidates) RecordTests(ctx context.Context, id string, passed bool, results []TestResult) (*Candidate, error) {
	return c.Record(ctx, Tested, &testedPayload{ID: id, Passed: passed, Results: results})
}

// RecordComparison journals a comparison with the baseline.
func (c *Candidates) RecordComparison(ctx context.Context, id string, cmp *Comparison) (*Candidate, error) {
	return c.Record(ctx, Evaluated, &evaluatedPayload{ID: id, Comparison: cmp})
}

// RecordApproval journals a person's approval and Keel's signature.
func (c *Candidates) RecordApproval(ctx context.Context, id string, sig *Signature, workspace string) (*Candidate, error) {
	return c.Record(ctx, Approved, &approvedPayload{ID: id, Signature: sig, Workspace: workspace})
}

// Find returns the candidate named name (NAME or NAME@DIGEST; by name,
// the newest proposal).
func (c *Candidates) Find(ctx context.Context, name string) (*Candidate, error) {
	list, err := c.List(ctx)
	if err != nil {
		return nil, err
	}
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].ID() == name || list[i].Name == name {
			return &list[i], nil
		}
	}
	return nil, fmt.Errorf("skill: no candidate %s", name)
}

// List returns every candidate, oldest proposal first.
func (c *Candidates) List(ctx context.Context) ([]Candidate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.s.Sync(ctx); err != nil {
		return nil, err
	}
	out := make([]Candidate, 0, len(c.order))
	for _, id := range c.order {
		out = append(out, *c.by[id])
	}
	return out, nil
}

// NewCandidateFiles builds a candidate's files: SKILL.md from its name,
// description and instructions, and the other files as given.
func NewCandidateFiles(name, description, instructions string, files map[string]string) (map[string][]byte, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	d, _ := json.Marshal(strings.Join(strings.Fields(description), " "))
	out["SKILL.md"] = fmt.Appendf(nil, "---\nname: %s\ndescription: %s\nmetadata:\n  keel-origin: agent\n---\n\n%s\n", name, d, strings.TrimSpace(instructions))
	keys := make([]string, 0, len(files))
	for p := range files {
		keys = append(keys, p)
	}
	slices.Sort(keys)
	for _, p := range keys {
		if p == "SKILL.md" {
			return nil, refused("give SKILL.md's parts as name, description and instructions")
		}
		if err := CheckPath(p); err != nil {
			return nil, err
		}
		out[p] = []byte(files[p])
	}
	return out, nil
}

// WriteCandidate stores files in the candidates store dir at NAME/HEX
// and returns the skill read back.
func WriteCandidate(dir, name string, files map[string][]byte) (*Skill, error) {
	var fs []File
	for p, b := range files {
		fs = append(fs, File{Path: p, Digest: FileDigest(b)})
	}
	d := Digest(fs)
	target := dirOf(dir, name, d)
	if err := write(target, files); err != nil {
		return nil, err
	}
	s, err := Read(target)
	if err != nil {
		return nil, err
	}
	if s.Digest != d {
		return nil, refused("candidate %s changed while stored", name)
	}
	return s, nil
}

func dirOf(store, name, digest string) string {
	return store + "/" + name + "/" + strings.TrimPrefix(digest, "sha256:")
}
