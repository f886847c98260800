package memory

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Scope names whose memory an entry is. The forms are:
//
//	agent:NAME            the agent's own memory
//	agent:NAME/user:USER  what the agent remembers for one user
//	user:USER             the user's, shared by every agent acting for them
//	project:ID            the project's (its workspace), shared by every run there
//	team                  everyone's on this journal
//
// The first two are private to one agent; the others are shared (see
// [Scope.Shared]), and Keel's default policy asks a person before an
// agent writes one.
type Scope string

// Scope kinds, as [Scope.Kind] returns them and as policies see them
// (resource.scope of Keel::Memory).
const (
	KindAgent     = "agent"
	KindAgentUser = "agent-user"
	KindUser      = "user"
	KindProject   = "project"
	KindTeam      = "team"
)

// TeamScope is the one team scope of a journal.
const TeamScope Scope = "team"

// AgentScope returns the agent's own scope.
func AgentScope(agent string) Scope { return Scope("agent:" + agent) }

// AgentUserScope returns the scope of what agent remembers for user.
func AgentUserScope(agent, user string) Scope { return Scope("agent:" + agent + "/user:" + user) }

// UserScope returns the user's scope.
func UserScope(user string) Scope { return Scope("user:" + user) }

// ProjectScope returns the scope of the project id (a workspace's
// path, see [ProjectID]).
func ProjectScope(id string) Scope { return Scope("project:" + id) }

// ProjectID returns the project id of a workspace: its absolute path
// with symbolic links resolved, as the caller gives it.
func ProjectID(workspace string) string { return workspace }

// Kind returns the scope's kind (KindAgent...), or "" for a malformed
// scope.
func (s Scope) Kind() string {
	str := string(s)
	switch {
	case str == "team":
		return KindTeam
	case strings.HasPrefix(str, "agent:") && strings.Contains(str, "/user:"):
		return KindAgentUser
	case strings.HasPrefix(str, "agent:"):
		return KindAgent
	case strings.HasPrefix(str, "user:"):
		return KindUser
	case strings.HasPrefix(str, "project:"):
		return KindProject
	}
	return ""
}

// Shared reports whether more than one agent reads the scope: a user's,
// a project's or the team's.
func (s Scope) Shared() bool {
	k := s.Kind()
	return k == KindUser || k == KindProject || k == KindTeam
}

// Check returns an error unless s is well formed: one of the forms of
// [Scope] with non-empty names of printable characters.
func (s Scope) Check() error {
	str := string(s)
	if !utf8.ValidString(str) || len(str) > 1024 || strings.IndexFunc(str, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("memory: scope %q: want printable text of at most 1,024 bytes", str)
	}
	ok := false
	switch s.Kind() {
	case KindTeam:
		ok = true
	case KindAgentUser:
		a, u, _ := strings.Cut(strings.TrimPrefix(str, "agent:"), "/user:")
		ok = a != "" && u != "" && !strings.Contains(a, "/")
	case KindAgent:
		ok = len(str) > len("agent:")
	case KindUser:
		ok = len(str) > len("user:")
	case KindProject:
		ok = len(str) > len("project:")
	}
	if !ok {
		return fmt.Errorf("memory: scope %q: want agent:NAME, agent:NAME/user:USER, user:USER, project:ID or team", str)
	}
	return nil
}

// Scopes are the scopes one run sees: its agent's own, what the agent
// remembers for the user it acts for and that user's, the project's and
// the team's. Nothing else is visible to a run, so an agent never reads
// another agent's private memory nor another user's.
type Scopes struct {
	Agent   string
	User    string
	Project string
}

// List returns the visible scopes, most private first.
func (v Scopes) List() []Scope {
	var out []Scope
	if v.Agent != "" {
		out = append(out, AgentScope(v.Agent))
		if v.User != "" {
			out = append(out, AgentUserScope(v.Agent, v.User))
		}
	}
	if v.User != "" {
		out = append(out, UserScope(v.User))
	}
	if v.Project != "" {
		out = append(out, ProjectScope(v.Project))
	}
	return append(out, TeamScope)
}

// Resolve returns the scope of kind (as a tool names it: "agent",
// "agent-user", "user", "project", "team") among v, or an error naming
// the kinds the run has.
func (v Scopes) Resolve(kind string) (Scope, error) {
	for _, s := range v.List() {
		if s.Kind() == kind {
			return s, nil
		}
	}
	var kinds []string
	for _, s := range v.List() {
		kinds = append(kinds, s.Kind())
	}
	return "", fmt.Errorf("this run has no %q memory scope; it has %s", kind, strings.Join(kinds, ", "))
}

// Sees reports whether s is one of the visible scopes.
func (v Scopes) Sees(s Scope) bool {
	for _, x := range v.List() {
		if x == s {
			return true
		}
	}
	return false
}
