package api

// Skill is a skill a run would be offered (docs/skills.md), verified.
type Skill struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Digest is the skill's content address ("sha256:HEX").
	Digest string `json:"digest"`
	// Source is user (the server's ~/.keel/skills), project (the
	// project's .keel/skills), index (installed from a discovery index)
	// or agent (agent-written, approved and signed).
	Source string `json:"source"`
	// URL is the index an installed skill came from.
	URL string `json:"url,omitempty"`
	// Files counts its files, SKILL.md among them.
	Files int `json:"files"`
	// Scripts says it has scripts; ScriptsAllowed that a person let an
	// installed skill's scripts run (--allow-scripts). The run's policy
	// decides (skill_scripts).
	Scripts        bool `json:"scripts"`
	ScriptsAllowed bool `json:"scripts_allowed,omitempty"`
	// Signed is Keel's signature of an agent-written skill, verified.
	Signed *SkillSignature `json:"signed,omitempty"`
	// Lockfile is the lockfile that pins it (install's answer).
	Lockfile string `json:"lockfile,omitempty"`
}

// SkillSignature names who signed and approved a skill.
type SkillSignature struct {
	Agent      string `json:"agent"`
	Version    int    `json:"version"`
	ApprovedBy string `json:"approved_by"`
}

// SkillList is the body of GET /v1/skills.
type SkillList struct {
	Skills []Skill `json:"skills"`
	// Refused says which skills are not offered and why (a changed
	// pinned skill, an untrusted lockfile); shown to admins only.
	Refused []string `json:"refused,omitempty"`
}

// SkillDetail is the body of GET /v1/skills/{name}: the skill, its files
// with their digests and its instructions (SKILL.md's body, what
// use_skill gives a run).
type SkillDetail struct {
	Skill
	FileList     []SkillFile `json:"file_list"`
	Instructions string      `json:"instructions"`
}

// SkillFile is one file of a skill.
type SkillFile struct {
	Path   string `json:"path"`
	Digest string `json:"digest"`
}

// InstallSkill is the body of POST /v1/skills/install (admins only).
type InstallSkill struct {
	// URL is the discovery index (or the publisher's origin).
	URL  string `json:"url"`
	Name string `json:"name"`
	// Workspace is the project, on the server, whose lockfile pins it.
	Workspace string `json:"workspace"`
	// AllowScripts lets runs execute its scripts (in their sandbox).
	AllowScripts bool `json:"allow_scripts,omitempty"`
}
