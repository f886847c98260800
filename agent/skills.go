package agent

import (
	"fmt"
	"strings"
)

// Skills are the skills offered to a run (RunCreated.Skills), chosen
// and verified when it was created: each skill's name and description
// are in every request (progressive disclosure: its instructions only
// when the model calls use_skill). The policy decided, per skill, that
// the run's agent may load it and whether its scripts may run.
type Skills struct {
	Entries []OfferedSkill `json:"entries"`
	// Tokens is the section's estimated size in tokens.
	Tokens int `json:"tokens"`
}

// OfferedSkill is one skill offered to a run.
type OfferedSkill struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Digest is the skill's content digest ("sha256:HEX"); every
	// execution verifies the files against it before using them.
	Digest string `json:"digest"`
	// Source is "user", "project", "index" or "agent".
	Source string `json:"source"`
	// Signed is set for a skill whose signature was verified.
	Signed bool `json:"signed,omitempty"`
	// Scripts is set when the policy lets its scripts run; otherwise its
	// scripts/ files are not given to the run.
	Scripts bool `json:"scripts,omitempty"`
	// Dir is the host directory the skill was read from.
	Dir string `json:"dir"`
}

// SkillsHeader starts the skills section.
const SkillsHeader = "# Skills"

// Section returns the skills section of the system prompt: names and
// descriptions only, or "" when none is offered.
func (k *Skills) Section() string {
	if k == nil || len(k.Entries) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(SkillsHeader)
	b.WriteString("\n\nSkills hold instructions, and sometimes scripts, for particular kinds of work. When one fits what you are doing, call use_skill with its name before you start: it returns its instructions and where its files are.\n")
	for _, e := range k.Entries {
		fmt.Fprintf(&b, "\n- %s: %s", e.Name, strings.Join(strings.Fields(e.Description), " "))
	}
	return b.String()
}
