package api

import "time"

// MemoryEntry is one memory entry (docs/memory.md): a note an agent or a
// person kept, in one scope, with its provenance and labels, and the
// runs it was offered to and used by.
type MemoryEntry struct {
	ID string `json:"id"`
	// Scope is agent:NAME, agent:NAME/user:USER, user:USER, project:PATH
	// or team.
	Scope  string       `json:"scope"`
	Text   string       `json:"text"`
	Labels MemoryLabels `json:"labels"`
	Source MemorySource `json:"source"`
	// Supersedes names the entry this one replaced; SupersededBy the
	// entry that replaced it.
	Supersedes   string `json:"supersedes,omitempty"`
	SupersededBy string `json:"superseded_by,omitempty"`
	// Written is when it was written; Seq its event in the memory stream.
	Written time.Time `json:"written"`
	Seq     int64     `json:"seq"`
	// Forgotten is set once a person forgot it: no later run is offered
	// it.
	Forgotten *MemoryForgotten `json:"forgotten,omitempty"`
	// OfferedRuns and UsedRuns are the runs it was offered to and the
	// runs whose model used it (cited or quoted), oldest first.
	OfferedRuns []string `json:"offered_runs,omitempty"`
	UsedRuns    []string `json:"used_runs,omitempty"`
}

// MemoryLabels are an entry's information-flow labels.
type MemoryLabels struct {
	// Integrity is "trusted" or "untrusted" (written by a run that had
	// seen untrusted input: reading it counts as untrusted input).
	Integrity string `json:"integrity"`
	// Confidentiality is "public" or "private".
	Confidentiality string `json:"confidentiality"`
}

// MemorySource is an entry's provenance: the run and tool call that
// wrote it (with the run's agent and the user it acted for), or the
// person who did (By).
type MemorySource struct {
	Run   string `json:"run,omitempty"`
	Call  string `json:"call,omitempty"`
	Agent string `json:"agent,omitempty"`
	User  string `json:"user,omitempty"`
	By    string `json:"by,omitempty"`
}

// MemoryForgotten says who forgot an entry, when and why.
type MemoryForgotten struct {
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Time   time.Time `json:"time"`
}

// MemoryList is the body of GET /v1/memory.
type MemoryList struct {
	Entries []MemoryEntry `json:"entries"`
}

// MemoryHistory is the body of GET /v1/memory/{id}: every version of the
// entry's text, oldest first (the entries it superseded and those that
// superseded it).
type MemoryHistory struct {
	Versions []MemoryEntry `json:"versions"`
}

// EditMemory is the body of POST /v1/memory/{id}/edit: the new text,
// written as a new entry that supersedes the old one.
type EditMemory struct {
	Text string `json:"text"`
}

// ForgetMemory is the body of POST /v1/memory/{id}/forget.
type ForgetMemory struct {
	Reason string `json:"reason,omitempty"`
}

// SkillCandidate is a skill an agent proposed (docs/skills.md), with its
// evidence: its tests in the sandbox, its comparison with the baseline
// and its approval.
type SkillCandidate struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	// State is proposed, tested, failed, evaluated, rejected or approved.
	State string `json:"state"`
	// Run, Call and Agent name where it was proposed.
	Run   string `json:"run,omitempty"`
	Call  string `json:"call,omitempty"`
	Agent string `json:"agent,omitempty"`
	// TestsPassed of Tests passed in the sandbox.
	Tests       int `json:"tests"`
	TestsPassed int `json:"tests_passed"`
	// Evidence is the comparison's verdict, Beats whether it beat the
	// baseline.
	Evidence string `json:"evidence,omitempty"`
	Beats    bool   `json:"beats"`
	// ApprovedBy and Version are set once a person approved it and Keel
	// signed it.
	ApprovedBy string `json:"approved_by,omitempty"`
	Version    int    `json:"version,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// SkillCandidateList is the body of GET /v1/skills/candidates.
type SkillCandidateList struct {
	Candidates []SkillCandidate `json:"candidates"`
}

// MemoryParams are the query of GET /v1/memory: what it lists.
type MemoryParams struct {
	// Scopes, when not empty, keeps entries of these scopes only.
	Scopes []string
	// All includes superseded and forgotten entries.
	All bool
}
