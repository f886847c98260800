package view

import (
	"strings"

	"github.com/keel-run/keel/agent"
)

// Settings are the settings a run was created with that shape what its
// calls may do, as every view shows them (keel runs show's header, the
// web UI's run page): its policy, the hosts it may reach, the names of
// its environment variables and its setup script. An environment
// variable is shown by its name only, never its value (a value typed
// into a form may be a token); a secret by its name and, for a secret
// bound to a host, that host.
type Settings struct {
	// Policy names the policy ("" when the run.created names none: the
	// executing process's); PolicySHA its digest's first 12 hex digits.
	Policy, PolicySHA string
	// Hosts are the hosts the run's calls may reach (none: no network).
	Hosts []string
	// Env are the names of the environment variables the run sets;
	// Secrets its secrets: "NAME (secret)", "NAME (secret for HOST)".
	Env, Secrets []string
	// Setup is the setup script run before the first model call;
	// SetupHosts the hosts it may reach.
	Setup      string
	SetupHosts []string
}

// SettingsOf returns the settings of run.created c.
func SettingsOf(c *agent.RunCreated) *Settings {
	s := &Settings{Hosts: c.Network, Setup: c.Setup, SetupHosts: c.SetupNetwork}
	if c.Policy != nil {
		s.Policy, s.PolicySHA = c.Policy.Name, c.Policy.SHA256
		if len(s.PolicySHA) > 12 {
			s.PolicySHA = s.PolicySHA[:12]
		}
	}
	for _, e := range c.Env {
		name, _, _ := strings.Cut(e, "=")
		s.Env = append(s.Env, name)
	}
	for _, n := range c.SecretEnv {
		s.Secrets = append(s.Secrets, n+" (secret)")
	}
	for _, h := range c.SecretHosts {
		s.Secrets = append(s.Secrets, h.Name+" (secret for "+h.Host+")")
	}
	return s
}

// Lines are the settings as lines of text (keel runs show's header):
// the policy and the hosts, the environment's names, and the setup
// script, each of its lines indented, when there is one.
func (s *Settings) Lines() []string {
	pol := "the executing process's"
	if s.Policy != "" {
		pol = s.Policy + " (sha256 " + s.PolicySHA + ")"
	}
	lines := []string{"policy " + pol + " · allowed hosts: " + list(s.Hosts)}
	env := list(append(append([]string(nil), s.Env...), s.Secrets...))
	if len(s.Env) > 0 {
		env += " (values not shown)"
	}
	lines = append(lines, "environment: "+env)
	if s.Setup != "" {
		head := "setup script"
		if len(s.SetupHosts) > 0 {
			head += " (may reach " + strings.Join(s.SetupHosts, ", ") + ")"
		}
		lines = append(lines, head+":")
		for l := range strings.Lines(strings.TrimRight(s.Setup, "\n")) {
			lines = append(lines, "    "+strings.TrimRight(l, "\n"))
		}
	}
	return lines
}

// list joins names with commas; none is "none".
func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
