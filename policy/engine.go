package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
	"github.com/cedar-policy/cedar-go"
	"github.com/keel-run/keel/policy/bash"
)

// Engine evaluates a compiled policy file; [Engine.Decide] is a [Policy].
// An Engine is immutable and safe for concurrent use.
type Engine struct {
	name, desc string
	src        []byte
	hash       string
	scratch    []string
	system     []string
	// deny are the paths of [paths] deny: workspace-relative, or
	// absolute (see DeniedPaths).
	deny     []string
	approval Approval
	// The policies, split by kind, each in file order.
	forbid, forbidAsk, permit, permitAsk ordered
	reasons                              map[cedar.PolicyID]string
	count                                int
	cases                                []Case
}

// Approval holds a policy file's approval settings.
type Approval struct {
	// Timeout is how long an approval may wait before Default applies; 0
	// means it waits as long as it takes.
	Timeout time.Duration
	// Default is the decision applied at the timeout: Deny (the default)
	// or Allow.
	Default Effect
}

// ordered is a policy list that cedar.Authorize iterates in file order,
// so that decisions list their policies deterministically.
type ordered []idPolicy

type idPolicy struct {
	id cedar.PolicyID
	p  *cedar.Policy
}

func (o ordered) All() iter.Seq2[cedar.PolicyID, *cedar.Policy] {
	return func(yield func(cedar.PolicyID, *cedar.Policy) bool) {
		for _, e := range o {
			if !yield(e.id, e.p) {
				return
			}
		}
	}
}

// fileFormat is the TOML form of a policy file.
type fileFormat struct {
	Version     int    `toml:"version"`
	Description string `toml:"description"`
	Approval    struct {
		Timeout string `toml:"timeout"`
		Default string `toml:"default"`
	} `toml:"approval"`
	Paths struct {
		Scratch *[]string `toml:"scratch"`
		System  *[]string `toml:"system"`
		Deny    []string  `toml:"deny"`
	} `toml:"paths"`
	Cedar string     `toml:"cedar"`
	Tests []caseToml `toml:"test"`
}

type caseToml struct {
	Name       string         `toml:"name"`
	Tool       string         `toml:"tool"`
	Command    string         `toml:"command"`
	Args       map[string]any `toml:"args"`
	Paths      []string       `toml:"paths"`
	Principal  string         `toml:"principal"`
	OnBehalfOf string         `toml:"on_behalf_of"`
	Network    []string       `toml:"network"`
	Sandbox    string         `toml:"sandbox"`
	Mount      string         `toml:"mount"`
	Holds      []string       `toml:"holds_secret"`
	Untrusted  string         `toml:"untrusted"`
	Unattended bool           `toml:"unattended"`
	OutputOut  bool           `toml:"output_out"`
	Expect     string         `toml:"expect"`
	Parts      []string       `toml:"parts"`
}

// DefaultScratch are the paths outside the workspace that the default
// policy treats as the sandbox's private scratch space: readable and
// writable without asking.
var DefaultScratch = []string{"/tmp", "/var/tmp", "/dev/shm", "/run", "/root", "~", "/dev/null", "/dev/zero", "/dev/full",
	"/dev/random", "/dev/urandom", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/fd", "/dev/tty", "/proc/self"}

// DefaultSystem are the read-only system directories the default policy
// lets commands read (programs and libraries), never write.
var DefaultSystem = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"}

// Parse compiles a policy file named name (the name is used in error
// messages and [Engine.Name]). A name ending in ".cedar" is a bare Cedar
// policy set with default settings; anything else is Keel's TOML policy
// format (docs/policy.md): version, description, [approval] timeout and
// default, [paths] scratch and system, the Cedar text in cedar, and
// [[test]] cases. It returns an error naming the problem and, for Cedar
// syntax errors, the line and column.
func Parse(name string, src []byte) (*Engine, error) {
	e := &Engine{name: name, src: bytes.Clone(src), scratch: DefaultScratch, system: DefaultSystem, approval: Approval{Default: Deny},
		reasons: map[cedar.PolicyID]string{}}
	sum := sha256.Sum256(src)
	e.hash = hex.EncodeToString(sum[:])
	cedarText := string(src)
	if !strings.HasSuffix(name, ".cedar") {
		var f fileFormat
		md, err := toml.Decode(string(src), &f)
		if err != nil {
			return nil, fmt.Errorf("policy: %s: %w", name, err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return nil, fmt.Errorf("policy: %s: unknown key %q", name, und[0].String())
		}
		if f.Version != 1 {
			return nil, fmt.Errorf("policy: %s: version = %d, want 1", name, f.Version)
		}
		e.desc = f.Description
		if f.Approval.Timeout != "" {
			d, err := time.ParseDuration(f.Approval.Timeout)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("policy: %s: approval.timeout %q: want a duration such as 30m or 24h", name, f.Approval.Timeout)
			}
			e.approval.Timeout = d
		}
		switch Effect(f.Approval.Default) {
		case "", Deny:
		case Allow:
			e.approval.Default = Allow
		default:
			return nil, fmt.Errorf("policy: %s: approval.default %q: want deny or allow", name, f.Approval.Default)
		}
		if f.Paths.Scratch != nil {
			e.scratch = cleanPaths(*f.Paths.Scratch)
		}
		if f.Paths.System != nil {
			e.system = cleanPaths(*f.Paths.System)
		}
		for _, d := range f.Paths.Deny {
			c, err := denyPath(d)
			if err != nil {
				return nil, fmt.Errorf("policy: %s: paths.deny %q: %w", name, d, err)
			}
			if !slices.Contains(e.deny, c) {
				e.deny = append(e.deny, c)
			}
		}
		if strings.TrimSpace(f.Cedar) == "" {
			return nil, fmt.Errorf("policy: %s: no cedar policies (the cedar key is empty)", name)
		}
		cedarText = f.Cedar
		for i, t := range f.Tests {
			c, err := t.compile()
			if err != nil {
				return nil, fmt.Errorf("policy: %s: test %d (%s): %w", name, i+1, t.Name, err)
			}
			e.cases = append(e.cases, c)
		}
	}
	list, err := cedar.NewPolicyListFromBytes(name, []byte(cedarText))
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", name, err)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("policy: %s: no policies", name)
	}
	seen := map[cedar.PolicyID]bool{}
	for i, p := range list {
		ann := p.Annotations()
		id := cedar.PolicyID(fmt.Sprintf("policy%d", i))
		if v, ok := ann["id"]; ok {
			if v == "" || strings.HasPrefix(string(v), "keel.") {
				return nil, fmt.Errorf("policy: %s: policy %d: @id %q is empty or uses the reserved prefix \"keel.\"", name, i+1, v)
			}
			id = cedar.PolicyID(v)
		}
		if seen[id] {
			return nil, fmt.Errorf("policy: %s: two policies have the id %q", name, id)
		}
		seen[id] = true
		if v, ok := ann["reason"]; ok {
			e.reasons[id] = string(v)
		}
		_, ask := ann["ask"]
		entry := idPolicy{id: id, p: p}
		switch {
		case p.Effect() == cedar.Forbid && ask:
			e.forbidAsk = append(e.forbidAsk, entry)
		case p.Effect() == cedar.Forbid:
			e.forbid = append(e.forbid, entry)
		case ask:
			e.permitAsk = append(e.permitAsk, entry)
		default:
			e.permit = append(e.permit, entry)
		}
		e.count++
	}
	return e, nil
}

func cleanPaths(ps []string) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if p == "~" || strings.HasPrefix(p, "~/") || strings.HasPrefix(p, "/") {
			out = append(out, path.Clean(p))
		}
	}
	return out
}

// Name returns the name the policy was parsed under.
func (e *Engine) Name() string { return e.name }

// Description returns the policy file's description.
func (e *Engine) Description() string { return e.desc }

// Source returns the policy file's bytes.
func (e *Engine) Source() []byte { return bytes.Clone(e.src) }

// Hash returns the hex SHA-256 of the policy file's bytes.
func (e *Engine) Hash() string { return e.hash }

// Len returns the number of Cedar policies.
func (e *Engine) Len() int { return e.count }

// Approval returns the file's approval settings.
func (e *Engine) Approval() Approval { return e.approval }

// request is one part to evaluate.
type request struct {
	part  Part
	req   cedar.Request
	ents  cedar.EntityMap
	facts *facts
	mount string // the workspace as the part sees it
}

// facts are what the engine tells the policy about one part: what the
// bash analysis finds of a command (or the engine of another tool's
// call), and whether the part writes a file that runs on its own
// (autorun) or hides files from git (hides; flow.go).
type facts struct {
	bash.Facts
	autorun, hides bool
}

// risk is the part's risk for the policy: high when it reaches the
// network or outside paths, is only known at run time or destroys;
// medium when it writes or its program is not a read-only one; low
// otherwise.
func (f *facts) risk(readOnlyProgram bool) string {
	switch {
	case f.Network || len(f.Outside) > 0 || len(f.WritesOutside) > 0 || f.Dynamic || f.Destructive:
		return "high"
	case f.Writes || !readOnlyProgram:
		return "medium"
	}
	return "low"
}

// under reports whether p is prefix or lies below it.
func under(p, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	return p == prefix || strings.HasPrefix(p, prefix+"/") || prefix == ""
}

// MaxParts bounds how many parts (simple commands) of one call the gate
// decides. A call with more is asked about whatever the policy says
// (policy id "keel.limit"), and its journaled decision lists only the
// first MaxParts parts with the count of the others.
const MaxParts = 256

// MaxPartText bounds the bytes of one part's text in a journaled
// decision (8 KiB); a longer text is cut, with [Part].Clipped set (and its
// words left out). A part's command, detail and redirections are cut to
// 1 KiB each.
const MaxPartText = 8 << 10

// Decide evaluates c: it splits the call into parts (see the package
// documentation), evaluates every part against the policies and returns
// the strictest outcome with every part's decision. Per part: a failing
// policy (an evaluation error) denies; a matching forbid denies; no
// matching permit denies (policy id "keel.default_deny"); a matching
// @ask policy asks, unless a [Grant] in c matches the part; otherwise the
// part is allowed. A bash command line with more than [MaxParts] simple
// commands, or nested deeper than [bash.MaxSubstitutionDepth]
// substitutions or 8 nested scripts, asks whatever the policies say
// (policy id "keel.limit"), with only its first MaxParts parts decided
// and listed. It reads nothing but c and e, and does no I/O but the bash
// analysis's for a call without a sandbox (c.Sandbox "none": where
// workspace paths lead on the host).
func (e *Engine) Decide(_ context.Context, c *Call) Decision {
	reqs, omitted, limited := e.requests(c)
	d := Decision{Effect: Allow}
	for i := range reqs {
		r := &reqs[i]
		p := r.part
		p.Index = i
		p.Effect, p.Policies, p.Reason = e.eval(r)
		if hit := e.deniedHit(r); hit != "" {
			p.Effect, p.Policies = Deny, []string{PolicyPaths}
			p.Reason = fmt.Sprintf("the policy forbids the path %s ([paths] deny)", hit)
		}
		if r.facts.Dynamic || r.facts.Code {
			p.Detail = r.facts.Why
		} else if r.facts.Sends != "" {
			p.Detail = r.facts.Sends
		} else if r.facts.Opaque != "" && p.Effect != Allow {
			p.Detail = r.facts.Opaque
		}
		if r.facts.AnyFile != "" && p.Effect != Allow && !strings.Contains(p.Detail, r.facts.AnyFile) {
			// What the part writes whose names its words do not show (an
			// archive extracted after untrusted input), also when it runs
			// code Keel cannot read.
			p.Detail = strings.TrimPrefix(p.Detail+"; "+r.facts.AnyFile, "; ")
		}
		if p.Effect != Allow && slices.ContainsFunc(p.Policies, func(id string) bool { return slices.Contains(flowPolicies, id) }) {
			// Say what flows: the secret and its encoding, the untrusted
			// input and the private data behind the question.
			if fd := flowDetail(c.Flow); fd != "" {
				p.Reason += " (" + fd + ")"
			}
		}
		if p.Effect == Ask {
			for gi := range c.Grants {
				if g := &c.Grants[gi]; g.Matches(c.Tool, &p) {
					p.Effect, p.Grant = Allow, g.ID
					p.Policies = []string{"keel.grant"}
					p.Reason = fmt.Sprintf("remembered approval (%s scope)", g.Scope)
					if g.By != "" {
						p.Reason += " by " + g.By
					}
					break
				}
			}
		}
		d.Effect = Stricter(d.Effect, p.Effect)
		d.Parts = append(d.Parts, p)
	}
	d.PartsOmitted = omitted
	if omitted > 0 {
		limited = fmt.Sprintf("the command line has %d simple commands; Keel decides at most %d", len(d.Parts)+omitted, MaxParts)
	}
	if limited != "" && d.Effect != Deny {
		d.Effect = Ask
		d.Policies = []string{"keel.limit"}
		d.Reason = limited + ", so a person must look at it"
	}
	// The headline names the first part decided as the call is, or,
	// when the call carries a secret, the first such part whose own text
	// shows where the secret comes from (chmod +x x.sh; cat
	// /proc/self/environ | ...: the dump, not the chmod).
	head := -1
	for i, p := range d.Parts {
		if p.Effect != d.Effect {
			continue
		}
		for _, id := range p.Policies {
			if !slices.Contains(d.Policies, id) {
				d.Policies = append(d.Policies, id)
			}
		}
		if head < 0 || !showsSecret(d.Parts[head].Text, c.Flow) && showsSecret(p.Text, c.Flow) {
			head = i
		}
	}
	if d.Reason == "" && head >= 0 {
		p := d.Parts[head]
		d.Reason = p.Reason
		if len(d.Parts) > 1 {
			d.Reason = fmt.Sprintf("part %d of %d (%s): %s", p.Index+1, len(d.Parts), clip(p.Text), p.Reason)
		}
	}
	for i := range d.Parts {
		p := &d.Parts[i]
		if len(p.Text) > MaxPartText {
			p.Text, p.Clipped = cut(p.Text, MaxPartText), true
			p.Words = nil // a clipped part cannot be remembered
		}
		p.Command, p.Detail = cut(p.Command, 1<<10), cut(p.Detail, 1<<10)
		for j := range p.Redirects {
			p.Redirects[j] = cut(p.Redirects[j], 1<<10)
		}
	}
	return d
}

// cut returns s cut to at most n bytes on a rune boundary, saying how
// much was left out.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	c := n
	for c > 0 && !utf8.RuneStart(s[c]) {
		c--
	}
	return fmt.Sprintf("%s… [%d more bytes]", s[:c], len(s)-c)
}

// eval evaluates one part.
func (e *Engine) eval(r *request) (Effect, []string, string) {
	var errs []string
	var errIDs []string
	run := func(o ordered) []string {
		if len(o) == 0 {
			return nil
		}
		_, diag := cedar.Authorize(o, r.ents, r.req)
		for _, de := range diag.Errors {
			errIDs = append(errIDs, string(de.PolicyID))
			errs = append(errs, fmt.Sprintf("%s: %s", de.PolicyID, de.Message))
		}
		var ids []string
		for _, rs := range diag.Reasons {
			ids = append(ids, string(rs.PolicyID))
		}
		return ids
	}
	forbid, forbidAsk, permit, permitAsk := run(e.forbid), run(e.forbidAsk), run(e.permit), run(e.permitAsk)
	switch {
	case len(errs) > 0:
		return Deny, errIDs, evalFailed + strings.Join(errs, "; ")
	case len(forbid) > 0:
		return Deny, forbid, e.reason(forbid[0], "forbidden by policy "+forbid[0])
	case len(permit)+len(permitAsk) == 0:
		return Deny, []string{"keel.default_deny"}, "no policy permits this"
	case len(forbidAsk)+len(permitAsk) > 0:
		ids := append(forbidAsk, permitAsk...)
		return Ask, ids, e.reason(ids[0], "policy "+ids[0]+" asks for approval")
	}
	return Allow, permit, e.reason(permit[0], "permitted by policy "+permit[0])
}

func (e *Engine) reason(id, fallback string) string {
	if r := e.reasons[cedar.PolicyID(id)]; r != "" {
		return r
	}
	return fallback
}

// Entity types of the Cedar schema (docs/policy.md).
const (
	typeAgent   = cedar.EntityType("Keel::Agent")
	typeAction  = cedar.EntityType("Keel::Action")
	typeCommand = cedar.EntityType("Keel::Command")
	typePath    = cedar.EntityType("Keel::Path")
	typeHost    = cedar.EntityType("Keel::Host")
	typeTool    = cedar.EntityType("Keel::Tool")
	typeMemory  = cedar.EntityType("Keel::Memory")
	typeSkill   = cedar.EntityType("Keel::Skill")
)

// Tools whose calls the engine decides on their own resource types.
const (
	// MemoryWriteTool writes a memory entry (package memory); its
	// resource is Keel::Memory::"KIND" of the scope it writes.
	MemoryWriteTool = "memory_write"
	// SkillLoadTool and SkillScriptsTool are asked, for each skill a run
	// could be offered, whether the run's agent may load it and whether
	// its scripts may run (package skill); the resource is
	// Keel::Skill::"NAME".
	SkillLoadTool    = "skill_load"
	SkillScriptsTool = "skill_scripts"
)

// actionGroups returns the action groups a tool belongs to.
func actionGroups(tool, effect string) []string {
	var g []string
	switch effect {
	case "read_only":
		g = append(g, "read")
	case "workspace_write":
		g = append(g, "write")
	default:
		g = append(g, "external")
	}
	if i := strings.Index(tool, "__"); i > 0 {
		// NAME__TOOL: a tool of the MCP server or connector NAME.
		g = append(g, "mcp")
	}
	switch tool {
	case "bash":
		g = append(g, "exec")
	case "fetch_url", "http_request":
		g = append(g, "network")
	}
	return g
}

// requests splits c into the parts to evaluate; it also returns how many
// parts beyond [MaxParts] it left out, and why it left some of a part
// unanalysed ("" when it did not).
func (e *Engine) requests(c *Call) ([]request, int, string) {
	mount := c.MountPath
	if mount == "" {
		mount = "/workspace"
	}
	if c.Sandbox == "none" && c.Workspace != "" {
		// Without a sandbox nothing is mounted: commands run in the host
		// directory, and the mount path is whatever the host has there.
		mount = c.Workspace
	}
	env := bash.Env{Mount: path.Clean(mount), Scratch: e.scratch, System: e.system}
	if len(c.ReadOnly) > 0 {
		env.System = append(cleanPaths(c.ReadOnly), e.system...)
	}
	if c.Sandbox == "none" && c.Workspace != "" {
		// The bash analysis resolves workspace paths on the host.
		env.Host = c.Workspace
	}
	if c.Sandbox == "none" {
		// Without a sandbox, /tmp and HOME are the host's own: only the
		// device files stay harmless.
		env.Scratch = nil
		for _, s := range e.scratch {
			if under(s, "/dev") || under(s, "/proc/self") {
				env.Scratch = append(env.Scratch, s)
			}
		}
	}
	kind := "employee"
	if c.OnBehalfOf != "" {
		kind = "assistant"
	}
	principal := cedar.NewEntityUID(typeAgent, cedar.String(c.Principal))
	action := cedar.NewEntityUID(typeAction, cedar.String(c.Tool))
	var actors []cedar.EntityUID
	for _, a := range c.Actors {
		actors = append(actors, cedar.NewEntityUID(typeAgent, cedar.String(a)))
	}
	base := cedar.EntityMap{
		principal: {UID: principal, Parents: cedar.NewEntityUIDSet(actors...), Attributes: cedar.NewRecord(cedar.RecordMap{
			"name": cedar.String(c.Principal), "kind": cedar.String(kind)})},
	}
	var parents []cedar.EntityUID
	for _, g := range actionGroups(c.Tool, c.Effect) {
		uid := cedar.NewEntityUID(typeAction, cedar.String(g))
		parents = append(parents, uid)
		base[uid] = cedar.Entity{UID: uid}
	}
	base[action] = cedar.Entity{UID: action, Parents: cedar.NewEntityUIDSet(parents...)}
	networkAllowed := len(c.Network) > 0 || c.Sandbox == "none"
	// A run whose output reaches people who may not hold its secrets
	// (Flow.OutputOut) has a way out without a host: its output.
	reach := networkAllowed || (c.Flow != nil && c.Flow.OutputOut)

	var out []request
	add := func(p Part, res cedar.Entity, f *facts, readOnlyProgram bool) {
		ents := make(cedar.EntityMap, len(base)+1)
		for k, v := range base {
			ents[k] = v
		}
		ents[res.UID] = res
		nested := len(p.Via) > 0
		ctx := cedar.RecordMap{
			"run": cedar.String(c.RunID), "call": cedar.String(c.CallID), "tool": cedar.String(c.Tool),
			"effect": cedar.String(c.Effect), "risk": cedar.String(f.risk(readOnlyProgram)),
			"workspace": cedar.String(c.Workspace), "mount": cedar.String(env.Mount), "sandbox": cedar.String(c.Sandbox),
			"user": cedar.String(c.OnBehalfOf), "delegated": cedar.Boolean(c.OnBehalfOf != ""),
			"network": cedar.Boolean(f.Network), "network_allowed": cedar.Boolean(networkAllowed), "hosts": strSet(f.Hosts),
			"outside": cedar.Boolean(len(f.Outside) > 0), "writes_outside": cedar.Boolean(len(f.WritesOutside) > 0),
			"outside_paths": strSet(f.Outside), "writes": cedar.Boolean(f.Writes), "dynamic": cedar.Boolean(f.Dynamic),
			"nested": cedar.Boolean(nested), "via": cedar.String(strings.Join(p.Via, " > ")),
			"reads": strSet(f.Reads), "written": strSet(f.Written), "code": cedar.Boolean(f.Code),
			"part": cedar.Long(len(out)), "parts": cedar.Long(0), "actors": strSet(c.Actors),
		}
		credentialContext(ctx, c.Credential)
		provider := ""
		if c.Credential != nil {
			provider = c.Credential.Provider
		}
		flowContext(ctx, c.Flow, provider)
		ctx["data_out"] = cedar.Boolean(dataOut(c, f, reach))
		ctx["unseen_out"] = cedar.Boolean(unseenOut(c, f, reach))
		ctx["writes_workspace"] = cedar.Boolean(writesWorkspace(f, env.Mount))
		ctx["autorun"] = cedar.Boolean(f.autorun)
		ctx["hides_from_git"] = cedar.Boolean(f.hides)
		out = append(out, request{part: p, ents: ents, facts: f, mount: env.Mount,
			req: cedar.Request{Principal: principal, Action: action, Resource: res.UID, Context: cedar.NewRecord(ctx)}})
	}

	omitted, limited := 0, ""
	switch {
	case c.Tool == "bash":
		command, clear := argString(c.Arguments, "command")
		if !clear {
			f := &facts{Facts: bash.Facts{Dynamic: true, Why: "the arguments name the command more than once (keys that differ only in case)"}}
			add(Part{Text: command, Command: "(ambiguous)"}, commandEntity(&bash.Command{Text: command}, ""), f, false)
			// Two readers would run different commands: a person looks,
			// whatever the policy says.
			limited = f.Why
			break
		}
		parts, n, short, err := bash.Analyse(command, env, MaxParts)
		if err != nil {
			f := &facts{Facts: bash.Facts{Dynamic: true, Why: err.Error()}}
			p := Part{Text: command, Command: "(unparsed)"}
			add(p, commandEntity(&bash.Command{Text: command}, ""), f, false)
			break
		}
		omitted, limited = n, short
		if len(parts) == 0 {
			add(Part{Text: command}, commandEntity(&bash.Command{Text: command}, ""), &facts{}, true)
			break
		}
		for i := range parts {
			cmd := &parts[i].Command
			f := &facts{Facts: parts[i].Facts}
			f.autorun, f.hides = persistence(cmd, f.Written, env.Mount, c.Autorun)
			// Files whose names the words do not show (git checkout
			// other, git stash pop), or a write whose target the
			// analysis cannot name (a pattern, a variable, a
			// substitution: >> AGENT?.md, f=.envrc; > $f, trial 7, P12)
			// may be any file: one that runs on its own or instructions
			// included.
			f.autorun = f.autorun || f.AnyFile != "" || len(f.Unresolved) > 0
			p := Part{Text: cmd.Text, Via: cmd.Via}
			if cmd.Prog < len(cmd.Words) {
				p.Command = cmd.Words[cmd.Prog]
			}
			if cmd.AllLiteral() {
				p.Words = append([]string{}, cmd.Words...)
			}
			p.Assigns = cmd.Assigns
			p.Input = cmd.Input
			for _, r := range cmd.Redirects {
				if r.Target != "" {
					p.Redirects = append(p.Redirects, r.Text)
				}
			}
			for _, w := range f.Written {
				if under(w, env.Mount) {
					p.Written = append(p.Written, w)
				}
			}
			add(p, commandEntity(cmd, p.Command), f, parts[i].ReadOnly && !f.Code)
		}
	case c.Tool == "fetch_url" || c.Tool == "http_request":
		rawURL, clear := argString(c.Arguments, "url")
		f := &facts{Facts: bash.Facts{Network: true}}
		if !clear {
			f.Dyn("the arguments name the URL more than once (keys that differ only in case)")
		}
		attrs := cedar.RecordMap{"url": cedar.String(rawURL), "host": cedar.String(""), "scheme": cedar.String(""), "port": cedar.Long(0)}
		host := ""
		if u, err := url.Parse(rawURL); err == nil {
			host = strings.ToLower(u.Hostname())
			attrs["host"], attrs["scheme"] = cedar.String(host), cedar.String(u.Scheme)
			port := map[string]int64{"http": 80, "https": 443}[u.Scheme]
			if ps := u.Port(); ps != "" {
				fmt.Sscan(ps, &port)
			}
			attrs["port"] = cedar.Long(port)
		}
		if host != "" {
			f.Hosts = []string{host}
		}
		uid := cedar.NewEntityUID(typeHost, cedar.String(host))
		add(Part{Text: requestText(c.Tool, rawURL, c.Arguments)}, cedar.Entity{UID: uid, Attributes: cedar.NewRecord(attrs)}, f, false)
	case c.Tool == MemoryWriteTool:
		kind, _ := argString(c.Arguments, "scope")
		if kind == "" {
			kind = "agent"
		}
		shared := kind == "user" || kind == "project" || kind == "team"
		uid := cedar.NewEntityUID(typeMemory, cedar.String(kind))
		add(Part{Text: "memory " + kind}, cedar.Entity{UID: uid, Attributes: cedar.NewRecord(cedar.RecordMap{
			"scope": cedar.String(kind), "shared": cedar.Boolean(shared)})}, &facts{}, false)
	case c.Tool == SkillLoadTool || c.Tool == SkillScriptsTool:
		name, _ := argString(c.Arguments, "name")
		attrs := cedar.RecordMap{"name": cedar.String(name)}
		for _, k := range []string{"digest", "source", "version"} {
			v, _ := argString(c.Arguments, k)
			attrs[cedar.String(k)] = cedar.String(v)
		}
		var m map[string]json.RawMessage
		_ = json.Unmarshal(c.Arguments, &m)
		attrs["signed"] = cedar.Boolean(string(m["signed"]) == "true")
		attrs["agent_written"] = cedar.Boolean(string(m["agent_written"]) == "true")
		attrs["approved"] = cedar.Boolean(string(m["approved"]) == "true")
		uid := cedar.NewEntityUID(typeSkill, cedar.String(name))
		add(Part{Text: "skill " + name}, cedar.Entity{UID: uid, Attributes: cedar.NewRecord(attrs)}, &facts{Facts: bash.Facts{Code: c.Tool == SkillScriptsTool}}, c.Tool == SkillLoadTool)
	case c.Server != "":
		// An MCP tool or a connector: the resource is its server, the
		// arguments are a record the policy can match field by field.
		args := string(c.Arguments)
		uid := cedar.NewEntityUID(typeServer, cedar.String(c.Server))
		f := &facts{Facts: bash.Facts{Writes: c.Effect != "read_only"}}
		add(Part{Text: args}, cedar.Entity{UID: uid, Attributes: cedar.NewRecord(cedar.RecordMap{
			"name": cedar.String(c.Server)})}, f, false)
		ctx := out[len(out)-1].req.Context.Map()
		ctx["server"] = cedar.String(c.Server)
		ctx["args"] = cedar.String(args)
		ctx["arguments"] = jsonRecord(c.Arguments)
		ctx["facts"] = factsRecord(c.Facts)
		out[len(out)-1].req.Context = cedar.NewRecord(ctx)
	case len(c.Paths) > 0:
		write := c.Effect != "read_only"
		for _, rel := range c.Paths {
			f := &facts{}
			abs := path.Join(env.Mount, rel)
			if write {
				f.Writes, f.Written = true, []string{abs}
				f.autorun, f.hides = autorun(rel)
				f.autorun = f.autorun || autorunListed(c.Autorun, abs)
			} else {
				f.Reads = []string{abs}
			}
			uid := cedar.NewEntityUID(typePath, cedar.String(rel))
			add(Part{Text: rel}, cedar.Entity{UID: uid, Attributes: cedar.NewRecord(cedar.RecordMap{
				"path": cedar.String(rel), "abs": cedar.String(abs)})}, f, !write)
		}
	default:
		args := string(c.Arguments)
		uid := cedar.NewEntityUID(typeTool, cedar.String(c.Tool))
		f := &facts{Facts: bash.Facts{Writes: c.Effect != "read_only"}}
		add(Part{Text: args}, cedar.Entity{UID: uid, Attributes: cedar.NewRecord(cedar.RecordMap{
			"name": cedar.String(c.Tool), "args": cedar.String(args)})}, f, c.Effect == "read_only")
	}
	for i := range out {
		ctx := out[i].req.Context.Map()
		ctx["parts"] = cedar.Long(len(out))
		if _, ok := ctx["facts"]; !ok && c.Facts != nil {
			// What the runtime tells about the call (a spawn_agent's
			// depth, fan-out and the tools, hosts and paths it asks).
			ctx["facts"] = factsRecord(c.Facts)
		}
		out[i].req.Context = cedar.NewRecord(ctx)
	}
	return out, omitted, limited
}

// requestText is the part text of a request: its URL, or for an
// http_request other than a plain GET its method, URL and a digest of its
// headers and body, so that a remembered approval binds all of them and
// never the URL alone.
func requestText(tool, rawURL string, args json.RawMessage) string {
	if tool != "http_request" {
		return rawURL
	}
	var in struct {
		Method  string   `json:"method"`
		Headers []string `json:"headers"`
		Body    *string  `json:"body"`
	}
	_ = json.Unmarshal(args, &in)
	m := strings.ToUpper(in.Method)
	if m == "" {
		m = "GET"
	}
	if m == "GET" && len(in.Headers) == 0 && in.Body == nil {
		return rawURL
	}
	text := m + " " + rawURL
	if len(in.Headers) > 0 || in.Body != nil {
		h := sha256.New()
		for _, x := range in.Headers {
			fmt.Fprintf(h, "%d:%s\n", len(x), x)
		}
		if in.Body != nil {
			fmt.Fprintf(h, "body %d:%s", len(*in.Body), *in.Body)
		}
		text += fmt.Sprintf(" (headers and body sha256:%x)", h.Sum(nil)[:8])
	}
	return text
}

// argString returns the string value of key in a JSON object and whether
// the object names it unambiguously: no other key that differs from it
// only in case, which a case-insensitive decoder (Go's encoding/json into
// a struct) could take instead. The tool registry refuses such objects
// before a call reaches the gate; this keeps the engine safe on its own.
func argString(args json.RawMessage, key string) (string, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		return "", true
	}
	clear := true
	for k := range m {
		if k != key && strings.EqualFold(k, key) {
			clear = false
		}
	}
	var s string
	if raw, ok := m[key]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s, clear
}

func commandEntity(c *bash.Command, prog string) cedar.Entity {
	var args []cedar.Value
	for _, a := range c.Args() {
		args = append(args, cedar.String(a))
	}
	var assigns []cedar.Value
	for _, a := range c.Assigns {
		assigns = append(assigns, cedar.String(a))
	}
	line := ""
	if c.Prog < len(c.Words) {
		line = strings.Join(c.Words[c.Prog:], " ")
	}
	sub := c.Subcommand()
	uid := cedar.NewEntityUID(typeCommand, cedar.String(c.Text))
	return cedar.Entity{UID: uid, Attributes: cedar.NewRecord(cedar.RecordMap{
		"name": cedar.String(c.Name()), "argv0": cedar.String(prog), "args": cedar.NewSet(args...),
		"line": cedar.String(line), "text": cedar.String(c.Text), "assigns": cedar.NewSet(assigns...), "subcommand": cedar.String(sub),
		"literal": cedar.Boolean(c.AllLiteral()),
	})}
}

func strSet(ss []string) cedar.Set {
	vs := make([]cedar.Value, len(ss))
	for i, s := range ss {
		vs[i] = cedar.String(s)
	}
	return cedar.NewSet(vs...)
}

var errNoArgs = errors.New("give command (for bash) or args")

func (t *caseToml) compile() (Case, error) {
	c := Case{Name: t.Name, Tool: t.Tool, Paths: t.Paths, Principal: t.Principal, OnBehalfOf: t.OnBehalfOf,
		Network: t.Network, Sandbox: t.Sandbox, Mount: t.Mount, Holds: t.Holds, Untrusted: t.Untrusted, Unattended: t.Unattended,
		OutputOut: t.OutputOut, Expect: Effect(t.Expect)}
	if c.Tool == "" {
		c.Tool = "bash"
	}
	switch {
	case t.Command != "" && t.Args != nil:
		return c, errors.New("give command or args, not both")
	case t.Command != "":
		if c.Tool != "bash" {
			return c, errors.New("command is only for the bash tool; give args")
		}
		b, _ := json.Marshal(map[string]string{"command": t.Command})
		c.Args = b
	case t.Args != nil:
		b, err := json.Marshal(t.Args)
		if err != nil {
			return c, err
		}
		c.Args = b
	default:
		return c, errNoArgs
	}
	switch c.Expect {
	case Allow, Ask, Deny:
	default:
		return c, fmt.Errorf("expect = %q, want allow, ask or deny", t.Expect)
	}
	for _, p := range t.Parts {
		switch Effect(p) {
		case Allow, Ask, Deny:
			c.Parts = append(c.Parts, Effect(p))
		default:
			return c, fmt.Errorf("parts: %q, want allow, ask or deny", p)
		}
	}
	return c, nil
}
