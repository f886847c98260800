package agent

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/policy/bash"
	"github.com/keel-run/keel/redact"
)

// Information-flow labels (docs/security.md, "Information flow"). Every
// tool result the run sees has an integrity (trusted, or untrusted: from
// the network or an external system) and a confidentiality (public, or
// private: read with a credential or from a connector). The executor
// journals the label of each result that is not trusted and public in
// its tool.finished; the fold keeps the first event that brought
// untrusted input and the first that brought private or secret data, and
// the gate shows both to the policy ([policy.Flow]).

// Label values.
const (
	LabelUntrusted = "untrusted"
	LabelPrivate   = "private"
	LabelSecret    = "secret"
)

// DataLabel is the label of a tool result that is not trusted and
// public.
type DataLabel struct {
	// Integrity is "untrusted" ("" means trusted).
	Integrity string `json:"integrity,omitempty"`
	// Confidentiality is "private" ("" means public).
	Confidentiality string `json:"confidentiality,omitempty"`
	// Why says where the data came from, for people.
	Why string `json:"why,omitempty"`
}

// FlowMark is the event that first brought untrusted input, or private
// or secret data, into a run.
type FlowMark struct {
	Seq    int64  `json:"seq"`
	CallID string `json:"call_id,omitempty"`
	Why    string `json:"why"`
}

// String says the mark for people: "fetch_url result of call c1 (event 7)".
func (m *FlowMark) String() string {
	if m == nil {
		return ""
	}
	return fmt.Sprintf("%s (event %d)", m.Why, m.Seq)
}

// Flow is what a run's data has been so far: the event that first
// brought untrusted input (nil: none yet) and those that brought private
// or secret data (the first of each tool, at most [MaxPrivateMarks]).
type Flow struct {
	Untrusted *FlowMark   `json:"untrusted,omitempty"`
	Private   []*FlowMark `json:"private,omitempty"`
	// Providers are the credential providers whose data the run read;
	// Other is set once it touched private or secret data of another kind
	// (see [policy.Flow]).
	Providers []string `json:"providers,omitempty"`
	Other     bool     `json:"other,omitempty"`
}

// MaxPrivateMarks bounds the private-data sources a run's flow keeps.
const MaxPrivateMarks = 4

// private says the private-data sources for people ("" when none).
func (f *Flow) private() string {
	var s []string
	for _, m := range f.Private {
		s = append(s, m.String())
	}
	return strings.Join(s, "; ")
}

// Secret is a value the run holds that must not leave it: a variable of
// the sandbox's environment given as secret, a connector's token. Name
// names it for people and policies; the value is never journaled.
type Secret struct {
	Name  string
	Value string
}

// SecretHost is a secret for one host (RunCreated.SecretHosts): Name is
// the variable of Keel's environment that holds the value and of the
// sandbox's that holds the placeholder; Host the destination, written
// as an allowlist entry. Body lets the egress proxy put the value in
// request bodies too (text bodies, bounded; without it a request whose
// body holds the placeholder is refused).
type SecretHost struct {
	Name string `json:"name"`
	Host string `json:"host"`
	Body bool   `json:"body,omitempty"`
}

// SecretValues returns the values of the run's secrets that getenv
// holds: its secret variables (SecretEnv), its OpenAPI connectors'
// tokens (TokenEnv) and its secrets for hosts (SecretHosts), in that
// order; missing names the secret variables and secrets for hosts
// getenv does not hold (an unset connector token is simply absent). The
// process that executes a run passes its environment; one that only
// shows a run (a diff) uses what it holds to hide the values.
func (c *RunCreated) SecretValues(getenv func(string) string) (secrets []Secret, missing []string) {
	for _, name := range c.SecretEnv {
		if v := getenv(name); v != "" {
			secrets = append(secrets, Secret{Name: name, Value: v})
		} else {
			missing = append(missing, name)
		}
	}
	for _, o := range c.OpenAPI {
		if o.TokenEnv != "" {
			if v := getenv(o.TokenEnv); v != "" {
				secrets = append(secrets, Secret{Name: o.TokenEnv, Value: v})
			}
		}
	}
	for _, h := range c.SecretHosts {
		if v := getenv(h.Name); v != "" {
			secrets = append(secrets, Secret{Name: h.Name, Value: v})
		} else {
			missing = append(missing, h.Name)
		}
	}
	return secrets, missing
}

// foldCreatedFlow marks what a run holds from its start: untrusted
// offered memory or a trigger's payload, secrets in its sandbox.
func (s *State) foldCreatedFlow(c *RunCreated) {
	if r := c.Recall; r != nil {
		for _, e := range r.Entries {
			if e.Labels.Untrusted() {
				s.Flow.Untrusted = &FlowMark{Seq: 1, Why: "an untrusted memory entry offered to the run"}
				break
			}
		}
	}
	if c.MemoryUntrusted != "" && s.Flow.Untrusted == nil {
		s.Flow.Untrusted = &FlowMark{Seq: 1, Why: c.MemoryUntrusted}
	}
	if c.TaskUntrusted != "" && s.Flow.Untrusted == nil {
		s.Flow.Untrusted = &FlowMark{Seq: 1, Why: c.TaskUntrusted}
	}
	if c.Labels["keel.trigger"] != "" && s.Flow.Untrusted == nil {
		s.Flow.Untrusted = &FlowMark{Seq: 1, Why: "the payload of trigger " + c.Labels["keel.trigger"]}
	}
	if len(c.SecretEnv) > 0 {
		s.Flow.Private = append(s.Flow.Private, &FlowMark{Seq: 1, Why: "the sandbox holds secret " + strings.Join(c.SecretEnv, ", ")})
		s.Flow.Other = true
	}
}

// foldEgress marks the run as having touched private data when the
// egress proxy first put a secret for a host into one of the sandbox's
// requests: the sandbox holds only placeholders, so the secret itself
// cannot leave, but what its host answered may be private (a private
// repository read with the token). Until then the run touched nothing
// private through it (fresh-user trial 5: every test run of a run with
// --secret-for-host asked after a pip install).
func (s *State) foldEgress(seq int64, e *SandboxEgress) {
	const why = "the sandbox's request to "
	if len(e.Substituted) == 0 || slices.ContainsFunc(s.Flow.Private, func(m *FlowMark) bool { return strings.HasPrefix(m.Why, why) }) {
		return
	}
	s.Flow.Private = append(s.Flow.Private, &FlowMark{Seq: seq,
		Why: why + e.Host + " carried secret " + strings.Join(e.Substituted, ", ") + " (its answer may be private)"})
	s.Flow.Other = true
}

// readsNetwork reports whether a call's result holds what came from
// outside the run: a bash command that uses the network (curl, wget, git
// fetch, pip download...) in a run whose sandbox may reach a host. Keel's
// own network tools and MCP and connector tools are untrusted by name
// (untrustedTool); a program that fetches in code Keel cannot read
// (python3 p.py) is not counted here: the secret rules ask for it.
func (s *State) readsNetwork(c *Call) bool {
	if c.Name != "bash" || len(s.Created.Network) == 0 {
		return false
	}
	var a struct {
		Command string `json:"command"`
	}
	if json.Unmarshal([]byte(c.Arguments), &a) != nil || a.Command == "" {
		return false
	}
	parts, _, _, err := bash.Analyse(a.Command, bash.Env{Mount: "/workspace"}, 0)
	if err != nil {
		return false // not bash: it did not run
	}
	for _, p := range parts {
		if p.Facts.Network {
			return true
		}
	}
	return false
}

// resultLabel is the label of a call's result (nil: trusted and public).
func (s *State) resultLabel(c *Call, f *ToolFinished) *DataLabel {
	if f.Synthetic {
		return nil
	}
	l := &DataLabel{}
	var why []string
	if f.Untrusted || untrustedTool(s, c.Name) {
		l.Integrity = LabelUntrusted
	}
	if c.Decision != nil && c.Decision.Credential != nil && c.Decision.Credential.Provider != "" {
		l.Confidentiality = LabelPrivate
		why = append(why, "read with a credential of "+c.Decision.Credential.Provider)
	} else if s.connectorTool(c.Name) {
		l.Confidentiality = LabelPrivate
		why = append(why, "read from a connector")
	}
	if *l == (DataLabel{}) {
		return nil
	}
	l.Why = strings.Join(why, "; ")
	return l
}

// callProvider is the credential provider a call was decided with ("":
// none).
func callProvider(c *Call) string {
	if c.Decision != nil && c.Decision.Credential != nil {
		return c.Decision.Credential.Provider
	}
	return ""
}

// connectorTool reports whether a tool is one of the run's connectors
// (an OpenAPI API or a database), whose results are private data.
func (s *State) connectorTool(name string) bool {
	server := ""
	for _, t := range s.Created.Tools {
		if t.Name == name {
			server = t.Server
		}
	}
	if server == "" {
		return false
	}
	for _, o := range s.Created.OpenAPI {
		if o.Name == server {
			return true
		}
	}
	for _, q := range s.Created.SQL {
		if q.Name == server {
			return true
		}
	}
	return false
}

// foldResultFlow marks the flow of a result appended at seq.
func (s *State) foldResultFlow(seq int64, c *Call, f *ToolFinished) {
	l := f.Label
	if l == nil {
		l = s.resultLabel(c, f) // journals written before labels
	}
	if l == nil {
		return
	}
	if l.Integrity == LabelUntrusted && s.Flow.Untrusted == nil {
		s.Flow.Untrusted = &FlowMark{Seq: seq, CallID: c.ID, Why: fmt.Sprintf("%s result of call %s", c.Name, c.ID)}
	}
	if l.Confidentiality == LabelPrivate || l.Confidentiality == LabelSecret {
		if p := callProvider(c); p != "" && l.Confidentiality == LabelPrivate {
			if !slices.Contains(s.Flow.Providers, p) {
				s.Flow.Providers = append(s.Flow.Providers, p)
			}
		} else {
			s.Flow.Other = true
		}
	}
	if (l.Confidentiality == LabelPrivate || l.Confidentiality == LabelSecret) && len(s.Flow.Private) < MaxPrivateMarks {
		prefix := c.Name + " result of call "
		for _, m := range s.Flow.Private {
			if strings.HasPrefix(m.Why, prefix) {
				return // this tool's first result is marked already
			}
		}
		why := prefix + c.ID
		if l.Why != "" {
			why += ", " + l.Why
		}
		s.Flow.Private = append(s.Flow.Private, &FlowMark{Seq: seq, CallID: c.ID, Why: why})
	}
}

// secretScanner finds a run's secrets in a call's arguments.
type secretScanner struct {
	names []string
	set   *redact.Secrets
	refs  []*regexp.Regexp // a reference to each secret's variable
	// again: seal with redact.Secrets.SealAgain (text that may hold
	// placeholders already; seal.go).
	again bool
}

func newSecretScanner(secrets []Secret, env []string) *secretScanner {
	if len(secrets) == 0 {
		return nil
	}
	sc := &secretScanner{}
	values := make([]string, len(secrets))
	for i, s := range secrets {
		sc.names = append(sc.names, s.Name)
		values[i] = s.Value
		if slices.Contains(env, s.Name) && validName().MatchString(s.Name) {
			sc.refs = append(sc.refs, regexp.MustCompile(`(^|[^A-Za-z0-9_])`+s.Name+`($|[^A-Za-z0-9_])`))
		} else {
			sc.refs = append(sc.refs, nil)
		}
	}
	sc.set = redact.NewSecrets(values...)
	return sc
}

var validName = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_]*$`)

// typedPlaceholder is a sealed placeholder's text as a model may type it
// in a call's arguments (« and » also as JSON escapes): the gate sees the
// arguments unsealed, where Seal's escape is gone again.
var typedPlaceholder = lazy.Regexp(`(?i:«|\\u00ab)secret:[A-Za-z_][A-Za-z0-9_]*:[a-z0-9-]+(?i:»|\\u00bb)`)

// scan returns the secrets args carry: by value in any argument, or, for
// tools that run code or commands, by naming the variable of one.
func (sc *secretScanner) scan(toolName string, args []byte) []policy.SecretUse {
	if sc == nil {
		return nil
	}
	var out []policy.SecretUse
	seen := map[int]bool{}
	for _, m := range sc.set.Scan(string(args)) {
		seen[m.Value] = true
		out = append(out, policy.SecretUse{Name: sc.names[m.Value], Form: m.Form})
	}
	if toolName == "bash" || toolName == "python" {
		dump := toolName == "bash" && policy.DumpsEnvironment(args)
		var resolved []byte
		if toolName == "bash" {
			// A name the words only spell once parsed: eval 'echo $API_'TOKEN.
			resolved = []byte(policy.ResolvedWords(args))
		}
		for i, re := range sc.refs {
			switch {
			case re == nil || seen[i]:
			case re.Match(args) && !re.Match(typedPlaceholder().ReplaceAll(args, nil)):
				// The name only inside placeholder text the model typed
				// («secret:NAME:as-is»): that text is sent as typed. The
				// call still counts as carrying the secret (the text
				// names it), but says so.
				out = append(out, policy.SecretUse{Name: sc.names[i], Form: "its name only, inside placeholder text the model typed, which is sent as typed, not as the value"})
			case re.Match(args) || re.Match(resolved):
				out = append(out, policy.SecretUse{Name: sc.names[i], Form: "by reference to its variable"})
			case dump:
				out = append(out, policy.SecretUse{Name: sc.names[i], Form: "in a dump of the whole environment"})
			}
		}
	}
	return out
}

// hide returns text without the secrets' values in any form.
func (sc *secretScanner) hide(text string) string {
	if sc == nil {
		return text
	}
	return sc.set.Hide(text)
}

// callFlow is the flow the gate shows the policy for a call.
func (x *executor) callFlow(toolName string, args []byte) *policy.Flow {
	fl := &policy.Flow{Secrets: x.secrets.scan(toolName, args), Untrusted: x.st.Flow.Untrusted.String(), Private: x.st.Flow.private(),
		PrivateProviders: x.st.Flow.Providers, PrivateOther: x.st.Flow.Other}
	l := x.st.Created.Labels
	fl.Unattended = l["keel.schedule"] != "" || l["keel.trigger"] != ""
	fl.Held = x.st.Created.SecretEnv
	fl.OutputOut = x.st.Created.ForeignSecrets && len(fl.Held) > 0
	if why := namesHostSecret(x.st.Created.SecretHosts, toolName, args); why != "" && !x.st.Flow.Other {
		// A command that names a secret for a host uses it there: what it
		// reads back may be private, and after untrusted input it may be
		// the injection's errand.
		fl.Private, fl.PrivateOther = why, true
	}
	if len(fl.Secrets) == 0 && fl.Untrusted == "" && fl.Private == "" && !fl.Unattended {
		return nil
	}
	return fl
}

// namesHostSecret says which secrets for hosts a bash or python call
// names by their variable ("" when none): the egress proxy puts their
// values into the call's requests to their hosts.
func namesHostSecret(hosts []SecretHost, toolName string, args []byte) string {
	if toolName != "bash" && toolName != "python" {
		return ""
	}
	var uses []string
	for _, h := range hosts {
		if !validName().MatchString(h.Name) {
			continue
		}
		if regexp.MustCompile(`(^|[^A-Za-z0-9_])` + h.Name + `($|[^A-Za-z0-9_])`).Match(args) {
			uses = append(uses, h.Name+" for "+h.Host)
		}
	}
	if len(uses) == 0 {
		return ""
	}
	return "this call names secret " + strings.Join(uses, ", ") + ", which the egress proxy puts into its requests to that host"
}
