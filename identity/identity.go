// Package identity holds Keel's principals: the agents runs execute as,
// their kind (an employee agent acting as itself, or an assistant agent
// acting on behalf of a user), their revocation, and their standing
// approvals (docs/architecture.md, "Contract — principals").
//
// # Storage and integrity
//
// The directory is an event stream in the run journal itself, under the
// reserved stream id [StreamID]: agent.created, agent.revoked,
// agent.granted, agent.ungranted and agent.restored events, hash-chained
// like every run's events and appended with the same optimistic
// concurrency, so several processes sharing one journal database see one
// directory, and any change made behind Keel's back without recomputing
// the hashes breaks the chain and is reported (a [*journal.CorruptError])
// by every read. (A rewrite that recomputes them is found only against an
// anchor kept elsewhere: package audit.) The journal database lives outside every workspace and
// outside the sandbox (the CLI refuses a database inside the workspace),
// so no tool can reach it. Streams whose id starts with [ReservedPrefix]
// are not runs: run listings skip them ([Reserved]).
//
// # Revocation
//
// [Directory.Check] is the gate's [policy.PrincipalCheck]: the runtime
// calls it before every gate decision and tool run, so revoking an agent
// takes effect at its next decision, in every process: its running runs
// pause with reason "revoked".
//
// Signed credentials, external accounts and delegation tokens are not
// here yet; the principal model (who acts, for whom) is.
package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
)

// StreamID is the journal stream that holds the directory.
const StreamID = ReservedPrefix + "identity"

// ReservedPrefix starts the ids of Keel's system streams, which are not
// runs.
//
// Deprecated: use [journal.SystemPrefix].
const ReservedPrefix = journal.SystemPrefix

// Reserved reports whether id names a system stream rather than a run.
//
// Deprecated: use [journal.IsSystem].
func Reserved(id string) bool { return journal.IsSystem(id) }

// LocalAgent is the implicit employee agent of the local command line
// (keel run without --agent). It exists without being created, and can be
// revoked like any other.
const LocalAgent = "keel-cli"

// DemoAgent is the implicit employee agent of keel demo.
const DemoAgent = "keel-demo"

// builtins are the agents that exist without being created.
var builtins = map[string]string{
	LocalAgent: "the local command line (built in)",
	DemoAgent:  "keel demo (built in)",
}

// Kind is an agent's kind.
type Kind string

// Agent kinds.
const (
	// Employee agents act as themselves.
	Employee Kind = "employee"
	// Assistant agents act on behalf of a user, named per run
	// (RunCreated.OnBehalfOf); authorization sees both.
	Assistant Kind = "assistant"
)

// Event types of the directory stream.
const (
	AgentCreated journal.Type = "agent.created"
	AgentRevoked journal.Type = "agent.revoked"
	AgentGranted journal.Type = "agent.granted"
	// AgentUngranted removes a standing approval ([Directory.Ungrant]).
	AgentUngranted journal.Type = "agent.ungranted"
	// AgentRestored undoes the revocation of a built-in agent
	// ([Directory.Restore]).
	AgentRestored journal.Type = "agent.restored"
)

// Errors callers branch on.
var (
	ErrExists       = errors.New("identity: agent already exists")
	ErrUnknown      = errors.New("identity: no such agent")
	ErrRevokedAgent = errors.New("identity: agent is revoked")
	ErrInvalid      = errors.New("identity: invalid agent")
)

// Agent is one principal: a named identity that runs execute as
// (RunCreated.Principal in package agent), acting as itself (an employee
// agent) or on behalf of one user (an assistant agent). The package agent
// is the run loop, not an identity: every run of it executes as some
// identity.Agent (a local `keel run` as the built-in [LocalAgent]).
type Agent struct {
	Name        string    `json:"name"`
	Kind        Kind      `json:"kind"`
	Description string    `json:"description,omitempty"`
	Created     time.Time `json:"created"`
	CreatedBy   string    `json:"created_by,omitempty"`
	// Builtin marks a built-in agent ([LocalAgent], [DemoAgent]).
	Builtin      bool      `json:"builtin,omitempty"`
	Revoked      bool      `json:"revoked,omitempty"`
	RevokedAt    time.Time `json:"revoked_at,omitzero"`
	RevokedBy    string    `json:"revoked_by,omitempty"`
	RevokeReason string    `json:"revoke_reason,omitempty"`
	// Grants are the agent's standing approvals (approvals remembered
	// with scope "agent").
	Grants []policy.Grant `json:"grants,omitempty"`
	// RestoredAt and RestoredBy record the newest restoration of a
	// built-in agent after a revocation ([Directory.Restore]).
	RestoredAt time.Time `json:"restored_at,omitzero"`
	RestoredBy string    `json:"restored_by,omitempty"`
	// Connectors, when set, are the only MCP servers, databases and APIs
	// the agent's runs on a team server offer (nil: the server's own;
	// empty: none).
	Connectors *Connectors `json:"connectors,omitempty"`
	// Parent is set on a sub-agent, "PARENT/NAME": the identity a child
	// run acts as (agent.SubPrincipal), below the agent its parent run
	// acts as. A sub-agent exists while its parent does, is of its kind,
	// may act only while every agent above it may, holds its own
	// standing approvals and theirs, and can be revoked alone.
	Parent string `json:"parent,omitempty"`
}

// Payloads of the directory's events.
type (
	createdPayload struct {
		Name        string      `json:"name"`
		Kind        Kind        `json:"kind"`
		Description string      `json:"description,omitempty"`
		By          string      `json:"by,omitempty"`
		Connectors  *Connectors `json:"connectors,omitempty"`
	}
	revokedPayload struct {
		Name   string `json:"name"`
		By     string `json:"by,omitempty"`
		Reason string `json:"reason,omitempty"`
	}
	grantedPayload struct {
		Name  string       `json:"name"`
		Grant policy.Grant `json:"grant"`
	}
)

// Options configures a [Directory]. The zero value is valid.
type Options struct {
	// Clock gives event times; nil means time.Now.
	Clock journal.Clock
}

// Directory is the agent directory of one journal. It is safe for
// concurrent use, and several Directories (in several processes) may share
// a journal: each read catches up with the stream's newest events.
type Directory struct {
	s *journal.Stream

	mu     sync.Mutex // guards agents; taken before the stream's lock
	agents map[string]*Agent
	// removed are the standing approvals removed (ungranted, or cleared
	// by a restore), by agent name and grant id.
	removed map[[2]string]Removal
}

// NewDirectory returns the directory stored in store.
func NewDirectory(store journal.Store, opts *Options) *Directory {
	d := &Directory{agents: map[string]*Agent{}, removed: map[[2]string]Removal{}}
	var clock journal.Clock
	if opts != nil {
		clock = opts.Clock
	}
	d.s = journal.NewStream(store, StreamID, clock, d.apply)
	return d
}

// CheckName returns an error wrapping [ErrInvalid] unless name is a valid
// agent name: 1 to 64 characters, lowercase letters, digits, '.', '_',
// '-' and '@', starting with a letter or digit.
func CheckName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: name %q must have 1 to 64 characters", ErrInvalid, name)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || i > 0 && strings.ContainsRune("._-@", r)
		if !ok {
			return fmt.Errorf("%w: name %q: use lowercase letters, digits, '.', '_', '-' and '@', starting with a letter or digit", ErrInvalid, name)
		}
	}
	return nil
}

// KeelsOwn reports whether name is in the form of Keel's own principals
// ("keel", keel.*, keel-*, _keel*: keel.timeout, keel-scheduler,
// keel-cli), which neither an agent nor a token may take: a person's or
// an agent's doing must never look automatic. name is compared in
// lower case.
func KeelsOwn(name string) bool {
	l := strings.ToLower(name)
	return l == "keel" || strings.HasPrefix(l, "keel.") || strings.HasPrefix(l, "keel-") || strings.HasPrefix(l, "keel ") || strings.HasPrefix(l, "_keel")
}

// sync catches up with the stream (journal.Stream.Sync). Callers hold
// d.mu.
func (d *Directory) sync(ctx context.Context) error { return d.s.Sync(ctx) }

func (d *Directory) apply(e *journal.Event) error {
	bad := func(format string, args ...any) error {
		return &journal.CorruptError{RunID: StreamID, Seq: e.Seq, Reason: fmt.Sprintf(format, args...)}
	}
	switch e.Type {
	case AgentCreated:
		var p createdPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return bad("agent.created does not decode: %v", err)
		}
		if a, ok := d.agents[p.Name]; ok && !a.Builtin {
			return bad("agent %q created twice", p.Name)
		}
		d.agents[p.Name] = &Agent{Name: p.Name, Kind: p.Kind, Description: p.Description, Created: e.Time, CreatedBy: p.By, Connectors: p.Connectors}
	case AgentRevoked:
		var p revokedPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return bad("agent.revoked does not decode: %v", err)
		}
		a := d.lookup(p.Name)
		if a == nil {
			return bad("agent.revoked for unknown agent %q", p.Name)
		}
		a.Revoked, a.RevokedAt, a.RevokedBy, a.RevokeReason = true, e.Time, p.By, p.Reason
	case AgentGranted:
		var p grantedPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return bad("agent.granted does not decode: %v", err)
		}
		a := d.lookup(p.Name)
		if a == nil {
			return bad("agent.granted for unknown agent %q", p.Name)
		}
		a.Grants = append(a.Grants, p.Grant)
	case AgentUngranted, AgentRestored:
		return d.applyChange(e, bad)
	default:
		return bad("unknown event type %s in the identity stream", e.Type)
	}
	return nil
}

// lookup returns the agent name, materialising the built-in local agent
// and the sub-agents of existing agents. Callers hold d.mu.
func (d *Directory) lookup(name string) *Agent {
	if a, ok := d.agents[name]; ok {
		return a
	}
	if desc, ok := builtins[name]; ok {
		a := &Agent{Name: name, Kind: Employee, Description: desc, Builtin: true}
		d.agents[name] = a
		return a
	}
	if parent, seg, ok := cutSub(name); ok && CheckName(seg) == nil {
		p := d.lookup(parent)
		if p == nil {
			return nil
		}
		a := &Agent{Name: name, Kind: p.Kind, Description: fmt.Sprintf("a child agent of %s (definition %s)", parent, seg), Parent: parent}
		d.agents[name] = a
		return a
	}
	return nil
}

// cutSub splits a sub-agent's name "PARENT/NAME" at its last '/'.
func cutSub(name string) (parent, seg string, ok bool) {
	i := strings.LastIndexByte(name, '/')
	if i <= 0 {
		return "", "", false
	}
	return name[:i], name[i+1:], true
}

// chain returns the agent name and the agents it acts for, nearest
// first (a sub-agent's parent, up to its root), or nil when one of them
// is unknown. Callers hold d.mu.
func (d *Directory) chain(name string) []*Agent {
	var out []*Agent
	for {
		a := d.lookup(name)
		if a == nil {
			return nil
		}
		out = append(out, a)
		if a.Parent == "" {
			return out
		}
		name = a.Parent
	}
}

// append journals one event (journal.Stream.Append); check validates it
// against the current state, again after another process appended
// first. Callers hold d.mu.
func (d *Directory) append(ctx context.Context, typ journal.Type, payload any, check func() error) error {
	_, err := d.s.Append(ctx, typ, payload, check)
	return err
}

// CreateParams describe a new agent.
type CreateParams struct {
	Name string
	// Kind defaults to [Employee].
	Kind        Kind
	Description string
	// By names who created it (a person).
	By string
	// Connectors, when set, are the agent's connectors (see
	// [Agent.Connectors]).
	Connectors *Connectors
}

// Create adds an agent and returns it. It returns an error wrapping
// [ErrInvalid] for a bad name or kind and [ErrExists] when the name is
// taken (revoked agents keep their name; built-in agents exist already).
func (d *Directory) Create(ctx context.Context, p *CreateParams) (*Agent, error) {
	if err := CheckName(p.Name); err != nil {
		return nil, err
	}
	if _, builtin := builtins[p.Name]; !builtin && KeelsOwn(p.Name) {
		return nil, fmt.Errorf("%w: name %q looks like one of Keel's own principals (keel.*, keel-*), which runs, approvals and notifications name as Keel's doing; name the agent after its work", ErrInvalid, p.Name)
	}
	kind := p.Kind
	if kind == "" {
		kind = Employee
	}
	if kind != Employee && kind != Assistant {
		return nil, fmt.Errorf("%w: kind %q, want employee or assistant", ErrInvalid, p.Kind)
	}
	if p.Connectors != nil {
		if err := p.Connectors.Check(); err != nil {
			return nil, err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.append(ctx, AgentCreated, &createdPayload{Name: p.Name, Kind: kind, Description: p.Description, By: p.By, Connectors: p.Connectors.clone()}, func() error {
		if d.lookup(p.Name) != nil {
			return fmt.Errorf("identity: create %q: %w", p.Name, ErrExists)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d.copy(d.agents[p.Name]), nil
}

func (d *Directory) copy(a *Agent) *Agent {
	c := *a
	c.Grants = slices.Clone(a.Grants)
	c.Connectors = a.Connectors.clone()
	return &c
}

// Get returns the agent name, or an error wrapping [ErrUnknown].
func (d *Directory) Get(ctx context.Context, name string) (*Agent, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.sync(ctx); err != nil {
		return nil, err
	}
	a := d.lookup(name)
	if a == nil {
		return nil, fmt.Errorf("identity: %q: %w", name, ErrUnknown)
	}
	return d.copy(a), nil
}

// List returns every agent, revoked ones included, sorted by name; the
// built-in agents ([LocalAgent], [DemoAgent]) are always listed, a
// sub-agent only once it was revoked or holds standing approvals.
func (d *Directory) List(ctx context.Context) ([]Agent, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.sync(ctx); err != nil {
		return nil, err
	}
	for name := range builtins {
		d.lookup(name)
	}
	out := make([]Agent, 0, len(d.agents))
	for _, a := range d.agents {
		if a.Parent != "" && !a.Revoked && len(a.Grants) == 0 {
			continue // a sub-agent is listed once something happened to it
		}
		out = append(out, *d.copy(a))
	}
	slices.SortFunc(out, func(a, b Agent) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RevokeParams describe a revocation.
type RevokeParams struct {
	// By names who revoked; Reason says why.
	By, Reason string
}

// Revoke revokes an agent: from its next gate decision on, its runs pause
// with reason "revoked" and none of its calls runs. It returns the agent,
// or an error wrapping [ErrUnknown], or [ErrRevokedAgent] when it already
// is revoked. Revocation is permanent for a created agent (create a new
// one instead); a built-in agent can be restored ([Directory.Restore]).
func (d *Directory) Revoke(ctx context.Context, name string, p *RevokeParams) (*Agent, error) {
	if p == nil {
		p = &RevokeParams{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.append(ctx, AgentRevoked, &revokedPayload{Name: name, By: p.By, Reason: p.Reason}, func() error {
		a := d.lookup(name)
		switch {
		case a == nil:
			return fmt.Errorf("identity: revoke %q: %w", name, ErrUnknown)
		case a.Revoked:
			return fmt.Errorf("identity: revoke %q: %w", name, ErrRevokedAgent)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d.copy(d.agents[name]), nil
}

// Grant stores a standing approval of the agent (a [policy.Grant] of scope
// "agent", as agent.Runtime.Resolve makes them). A grant whose ID the
// agent already has is ignored. It returns an error wrapping [ErrUnknown]
// or [ErrRevokedAgent], or [ErrInvalid] for a grant of another scope or
// one that matches nothing.
func (d *Directory) Grant(ctx context.Context, name string, g policy.Grant) error {
	if g.Scope != policy.ScopeAgent || g.Tool == "" || g.ID == "" || (g.Exact == "" && len(g.Prefix) == 0) {
		return fmt.Errorf("%w: grant %+v: want an agent-scope grant with an id, a tool and exact text or a prefix", ErrInvalid, g)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	dup := false
	err := d.append(ctx, AgentGranted, &grantedPayload{Name: name, Grant: g}, func() error {
		a := d.lookup(name)
		switch {
		case a == nil:
			return fmt.Errorf("identity: grant to %q: %w", name, ErrUnknown)
		case a.Revoked:
			return fmt.Errorf("identity: grant to %q: %w", name, ErrRevokedAgent)
		}
		if slices.ContainsFunc(a.Grants, func(x policy.Grant) bool { return x.ID == g.ID }) {
			dup = true
			return errDuplicate
		}
		return nil
	})
	if dup {
		return nil
	}
	return err
}

var errDuplicate = errors.New("identity: duplicate grant")

// Check is the gate's [policy.PrincipalCheck]. It returns the agent's
// standing grants when principal may act for onBehalfOf, and otherwise an
// error wrapping [policy.ErrRevoked]: the agent is revoked or unknown, an
// assistant agent acts for nobody, or an employee agent claims to act for
// someone. Other errors (a journal that cannot be read, a tampered
// directory) are returned as they are, and the runtime fails closed.
func (d *Directory) Check(ctx context.Context, principal, onBehalfOf string) ([]policy.Grant, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.sync(ctx); err != nil {
		return nil, err
	}
	chain := d.chain(principal)
	if chain == nil {
		return nil, fmt.Errorf("%w: %w: %q", policy.ErrRevoked, ErrUnknown, principal)
	}
	var grants []policy.Grant
	for _, a := range chain {
		if a.Revoked {
			who := fmt.Sprintf("%q", a.Name)
			if a.Name != principal {
				who = fmt.Sprintf("%q, which %q acts for,", a.Name, principal)
			}
			return nil, fmt.Errorf("%w: %w: %s was revoked %s by %s: %s", policy.ErrRevoked, ErrRevokedAgent, who,
				a.RevokedAt.Format(time.RFC3339), orSomeone(a.RevokedBy), orNoReason(a.RevokeReason))
		}
		grants = append(grants, a.Grants...)
	}
	a := chain[0]
	switch {
	case a.Kind == Assistant && onBehalfOf == "":
		return nil, fmt.Errorf("%w: %w: assistant agent %q must act on behalf of a user", policy.ErrRevoked, ErrInvalid, principal)
	case a.Kind == Employee && onBehalfOf != "":
		return nil, fmt.Errorf("%w: %w: employee agent %q acts as itself, not on behalf of %q", policy.ErrRevoked, ErrInvalid, principal, onBehalfOf)
	}
	return grants, nil
}

func orSomeone(s string) string {
	if s == "" {
		return "someone"
	}
	return s
}

func orNoReason(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}
