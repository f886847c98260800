package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/realpath"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

// Labels the server sets in a run's run.created. Labels starting with
// [ReservedLabelPrefix] are the server's: a create request may not set
// them, so a run that carries one got it from the server (or from a
// process with the journal database in hand).
const (
	// ReservedLabelPrefix starts every label of Keel's own.
	ReservedLabelPrefix = "keel."
	// LabelDemo marks the demo run the server made (api.CreateRun.Demo),
	// with its own workspace, model and policy.
	LabelDemo = "keel.demo"
	// LabelCreatedBy and LabelCreatedByToken name the person who created
	// the run (or the fork) and the id of the API token they used.
	LabelCreatedBy      = "keel.created_by"
	LabelCreatedByToken = "keel.created_by_token"
	// LabelOverride lists what an admin token chose instead of the
	// server's settings ("sandbox", "policy"), comma-separated.
	LabelOverride = "keel.override"
)

// admission is what [Service.admit] checks a run against: who asks, and
// for what.
type admission struct {
	who *Caller
	// demo is the demo run the server made for api.CreateRun.Demo (or a
	// fork or resume of it): its model and policy are the server's own.
	demo bool
	// demoWorkspace is a demo run that keeps the workspace the server
	// made for it: the workspace roots do not apply, and any token may
	// act as the demo's agent there.
	demoWorkspace bool
	// existing is the id of the existing run the caller acts on (a
	// resume, a follow-up, a rewind), "" for a new run or a fork: a
	// demo run is its creator's (see mayContinue).
	existing string
	// overrides collects what an admin chose instead of the server's
	// settings; the caller journals them.
	overrides []string
}

func (a *admission) admin() bool { return a.who.admin() }

// confinement holds the directories runs may and may not work in,
// symlinks resolved once at construction.
type confinement struct {
	// roots are the workspace roots, each as configured (cleaned) and as
	// resolved; protected the paths no workspace may be, be in, or
	// contain.
	roots, resolvedRoots []string
	protected            []string
	// journal are the journal's files, which no workspace may be or
	// contain.
	journal []string
	replay  []string
	// demoDir is Options.DemoDir, cleaned: the service's own copies of
	// the demo project, each a directory right in it, may be inside a
	// protected path (keel serve keeps them in Keel's home).
	demoDir string
}

func newConfinement(o *Options) *confinement {
	c := &confinement{}
	if o.DemoDir != "" {
		c.demoDir = filepath.Clean(o.DemoDir)
	}
	for _, r := range o.WorkspaceRoots {
		if r == "" {
			continue
		}
		clean := filepath.Clean(r)
		c.roots = append(c.roots, clean)
		c.resolvedRoots = append(c.resolvedRoots, realpath.Resolve(clean))
	}
	for _, p := range o.Protected {
		if p != "" {
			c.protected = append(c.protected, filepath.Clean(p), realpath.Resolve(p))
		}
	}
	for _, p := range o.JournalFiles {
		if p != "" {
			c.journal = append(c.journal, filepath.Clean(p), realpath.Resolve(p))
		}
	}
	for _, d := range o.ReplayDirs {
		if d != "" {
			c.replay = append(c.replay, filepath.Clean(d), realpath.Resolve(d))
		}
	}
	return c
}

// noRoots is the error of a create or fork on a server without workspace
// roots.
var noRoots = &Error{Code: api.CodeInvalidRequest, Message: "this server has no workspace roots, so runs cannot work on its directories (only the demo run can); " +
	"its operator names the directories runs may use: keel serve --workspace-root DIR, or workspace_roots in the [serve] table of config.toml"}

// checkWorkspace checks that dir may be a run's workspace and returns it
// with symlinks resolved. needRoot requires it to be under a workspace
// root; a directory holding (or inside) the server's own files is never
// allowed. Paths outside the roots get the same answer whether they exist
// or not.
func (c *confinement) checkWorkspace(dir string, needRoot bool) (string, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return "", badRequest("workspace %q: want an absolute directory on the server", dir)
	}
	clean := filepath.Clean(dir)
	notUnder := func() error {
		return badRequest("workspace %s is not under one of this server's workspace roots (%s)", dir, strings.Join(c.roots, ", "))
	}
	if needRoot {
		if len(c.roots) == 0 {
			return "", noRoots
		}
		if !slices.ContainsFunc(c.roots, func(r string) bool { return realpath.Within(clean, r) }) &&
			!slices.ContainsFunc(c.resolvedRoots, func(r string) bool { return realpath.Within(clean, r) }) {
			return "", notUnder()
		}
	}
	real, err := filepath.EvalSymlinks(clean)
	if err != nil {
		return "", badRequest("workspace %s is not a directory on the server", dir)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", badRequest("workspace %s is not a directory on the server", dir)
	}
	if needRoot && !slices.ContainsFunc(c.resolvedRoots, func(r string) bool { return realpath.Within(real, r) }) {
		return "", notUnder() // a symlink out of the roots
	}
	// A copy of the demo project the service made in its demo directory
	// is the service's own, wherever that directory is: a demo run's
	// workspace (or the journal's owner's choice), which needs no root.
	ownDemo := !needRoot && c.demoDir != "" && filepath.Dir(real) == realpath.Resolve(c.demoDir)
	for _, p := range c.protected {
		if realpath.Within(p, real) {
			return "", badRequest("workspace %s holds the server's own files (its home directory, journal or secrets); choose another directory", dir)
		}
		if realpath.Within(real, p) && !ownDemo {
			return "", badRequest("workspace %s is inside the server's own files (its home directory); choose a directory outside it", dir)
		}
	}
	for _, p := range c.journal {
		if realpath.Within(p, real) || realpath.Within(real, p) {
			return "", badRequest("workspace %s holds the server's own files (its journal); choose another directory", dir)
		}
	}
	return real, nil
}

// underRoot refuses dir, a directory to be made, unless it is under a
// workspace root (its parent, as named or resolved).
func (c *confinement) underRoot(dir string) error {
	if len(c.roots) == 0 {
		return noRoots
	}
	clean := filepath.Clean(dir)
	parent := filepath.Dir(clean)
	if real, err := filepath.EvalSymlinks(parent); err == nil && slices.ContainsFunc(c.resolvedRoots, func(r string) bool { return realpath.Within(real, r) }) {
		return nil
	}
	return badRequest("workspace %s is not under one of this server's workspace roots (%s)", dir, strings.Join(c.roots, ", "))
}

// checkReplay checks the path of a replay: model spec and returns it
// resolved within a recording directory; a relative name is looked up in
// each directory in order. Every refusal has the same text, so it says
// nothing about files outside the directories (or inside them).
func (c *confinement) checkReplay(name string) (string, error) {
	for _, dir := range c.replay {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		p = filepath.Clean(p)
		if !realpath.Within(p, dir) {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		inside := func(d string) bool { return realpath.Within(real, d) }
		if fi, err := os.Stat(real); err == nil && fi.Mode().IsRegular() && slices.ContainsFunc(c.replay, inside) && !slices.ContainsFunc(c.protected, inside) {
			return real, nil
		}
	}
	return "", badRequest("replay recording %q is not one of this server's recordings (they come only from the recording directories its operator configured)", name)
}

// mayActAs checks that the caller may start or continue a run of agent
// principal acting for onBehalfOf: an admin may do anything; any other
// token only as the agents bound to it, and only on behalf of its own
// person. The demo's agent acts for the demo run only.
func (a *admission) mayActAs(principal, onBehalfOf string) error {
	if a.admin() {
		return nil
	}
	// A child agent ("PARENT/NAME") acts as far as its root agent may.
	root := credential.Owner(principal)
	if root == identity.DemoAgent && a.demoWorkspace && onBehalfOf == "" {
		return nil
	}
	if !slices.Contains(a.who.Agents, root) {
		bound := "is bound to no agent: it may start only the demo run,"
		if len(a.who.Agents) > 0 {
			bound = "may act only as " + strings.Join(a.who.Agents, ", ") + ","
		}
		return forbidden("token %s (%s) %s not as agent %s; an admin makes tokens for agents", a.who.ID, visible.String(a.who.Name), bound, principal)
	}
	if onBehalfOf != "" && onBehalfOf != a.who.Name {
		return forbidden("a run acts on behalf of the person whose token starts it (%s), not %s", a.who.Name, onBehalfOf)
	}
	return nil
}

// mayContinue checks that the caller may change run id, made by c, an
// existing run (resume it, send it a message, rewind its files, cancel
// it). A demo run belongs to the person who created it: any token acts
// as the shared demo agent, so the agent does not say whose run it is.
// Others may read it and fork it (a fork gets a fresh copy of the demo
// project), not change it; an admin may.
func (a *admission) mayContinue(id string, c *agent.RunCreated) error {
	if c.Labels[LabelDemo] == "" || a.admin() {
		return nil
	}
	owner := c.Labels[LabelCreatedBy]
	if owner != "" && a.who != nil && owner == a.who.Name {
		return nil
	}
	by := "on the server's machine"
	if owner != "" {
		by = "by " + visible.String(owner)
	}
	return forbidden("run %s is a demo run started %s: only that person (or an admin) may resume, message, rewind or cancel it; fork it to work on your own copy of the demo project", id, by)
}

// MayChange says why who may not change run id (resume it, send it a
// message, rewind its files, cancel it), nil when it may as far as the
// run's maker is concerned (a demo run is its creator's): the front ends
// offer those actions only to a caller that may. The token's scopes are
// the caller's to check.
func (s *Service) MayChange(ctx context.Context, who *Caller, id string) error {
	c, err := s.sums.created(ctx, id)
	if err != nil {
		return err
	}
	return (&admission{who: who}).mayContinue(id, c)
}

// sandboxKind returns the server's sandbox ("linux" unless Options say).
func (s *Service) sandboxKind() string {
	if s.opts.Sandbox == "" {
		return "linux"
	}
	return s.opts.Sandbox
}

// checkSandbox checks a run's sandbox kind sb ("" means the server's).
func (s *Service) checkSandbox(a *admission, sb string) error {
	if a.who.Local {
		return nil // the journal's owner runs what they choose
	}
	switch sb {
	case "", s.sandboxKind(), "linux":
		return nil
	case "none":
		if a.admin() && s.opts.AllowSandboxOverride {
			a.overrides = append(a.overrides, "sandbox")
			return nil
		}
		return forbidden("this server runs every command in its linux sandbox: a run without isolation (sandbox none) needs an admin token, on a server whose operator allows it")
	}
	return badRequest("sandbox %q: want linux or none", sb)
}

// checkPolicy checks that a run decides by the server's policy (or the
// demo's, for the demo run); an admin may choose another.
func (s *Service) checkPolicy(a *admission, ref *agent.PolicyRef) error {
	if a.who.Local {
		return nil
	}
	if ref != nil && (ref.SHA256 == s.policyRef.SHA256 || a.demo && ref.SHA256 == s.demoPolicyRef.SHA256) {
		return nil
	}
	if a.admin() {
		a.overrides = append(a.overrides, "policy")
		return nil
	}
	return forbidden("runs on this server are decided by its operator's policy (%s); only an admin token may choose another", s.policyRef.Name)
}

// checkModel checks a model spec from a client: replay recordings only
// from the recording directories, openai-compatible endpoints only those
// the operator named (an admin may name any). It returns the spec to use
// (a replay's recording resolved to its path). A recording's file name
// is looked up in the recording directories for every token; an admin
// may also name any path (an absolute one, or one relative to the
// server's directory that is in no recording directory).
func (s *Service) checkModel(a *admission, spec string) (string, error) {
	ms, err := model.ParseSpec(spec)
	if err != nil || a.demo {
		return spec, nil // Prepare reports a malformed spec
	}
	if a.admin() {
		if ms.Provider == "replay" && !filepath.IsAbs(ms.Name) {
			if p, err := s.conf.checkReplay(ms.Name); err == nil {
				return "replay:" + p, nil
			}
		}
		return spec, nil
	}
	if d, err := model.ParseSpec(s.opts.DefaultModel); err == nil && d == ms {
		return spec, nil // the operator's own default
	}
	switch ms.Provider {
	case "replay":
		p, err := s.conf.checkReplay(ms.Name)
		if err != nil {
			return "", err
		}
		return "replay:" + p, nil
	case "openai-compatible":
		if !slices.Contains(s.opts.ModelBaseURLs, ms.BaseURL) {
			return "", forbidden("model endpoint %s is not one this server's operator allows (an admin token may name any)", ms.BaseURL)
		}
	}
	return spec, nil
}

// checkLimits refuses limits that are not limits (negative, or a
// malformed timeout); ApplyLimits says how.
func checkLimits(l *api.Limits) error {
	_, err := ApplyLimits(DefaultLimits(), l)
	return err
}

// checkLabels checks a request's labels, whoever asks: keys of 1 to 128
// bytes and values of at most 1024, and none of Keel's own.
func checkLabels(labels map[string]string) error {
	for k, v := range labels {
		switch {
		// Whatever the case, and through compatibility look-alikes
		// ("ＫEEL.created_by"), as token names are checked.
		case strings.HasPrefix(strings.ToLower(norm.NFKC.String(k)), ReservedLabelPrefix):
			return badRequest("label %q: labels starting with %q (in any case) are Keel's own", visible.String(k), ReservedLabelPrefix)
		case strings.TrimSpace(k) == "" || len(k) > 128 || len(v) > 1024:
			return badRequest("label %q: keys are 1 to 128 bytes, values at most 1024", visible.String(k))
		}
	}
	return nil
}

// admitRequest checks a create request before it is prepared and fills
// in what the caller implies: the agent a bound token acts as, and the
// person an assistant agent acts for.
func (s *Service) admitRequest(ctx context.Context, a *admission, req *api.CreateRun) error {
	if err := checkLimits(&req.Limits); err != nil {
		return err
	}
	if err := checkLabels(req.Labels); err != nil {
		return err
	}
	if req.Demo {
		if set := demoExtras(req, a.who.Local); len(set) > 0 {
			return badRequest("the demo run has its own task, model, agent, workspace, sandbox, policy and limits and takes none of them: remove %s (or leave out demo to create another run)", strings.Join(set, ", "))
		}
		return nil
	}
	if err := s.checkSandbox(a, req.Sandbox); err != nil {
		return err
	}
	if req.Model != "" {
		m, err := s.checkModel(a, req.Model)
		if err != nil {
			return err
		}
		req.Model = m
	}
	if req.Agent == "" && !a.admin() {
		switch len(a.who.Agents) {
		case 0:
			return forbidden("token %s (%s) is bound to no agent, so it can start only the demo run; an admin makes tokens for agents", a.who.ID, a.who.Name)
		case 1:
			req.Agent = a.who.Agents[0]
		default:
			return badRequest("agent: this token may act as %s; name one", strings.Join(a.who.Agents, ", "))
		}
	}
	if req.Agent != "" && req.OnBehalfOf == "" && !a.who.Local {
		if ag, err := s.opts.Directory.Get(ctx, req.Agent); err == nil && ag.Kind == identity.Assistant {
			req.OnBehalfOf = a.who.Name
		}
	}
	if !a.admin() && req.Agent != "" {
		if err := a.mayActAs(req.Agent, req.OnBehalfOf); err != nil {
			return err
		}
	}
	if _, err := s.conf.checkWorkspace(req.Workspace, !a.who.Local); err != nil {
		return err
	}
	return nil
}

// demoExtras returns the fields of a demo create request that the demo
// does not take: everything but labels, and the sandbox, which the
// command line on the journal's machine (local) chooses (keel demo
// --sandbox).
func demoExtras(req *api.CreateRun, local bool) []string {
	var set []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"task", req.Task != ""}, {"model", req.Model != ""}, {"agent", req.Agent != ""}, {"on_behalf_of", req.OnBehalfOf != ""},
		{"workspace", req.Workspace != ""}, {"mount_path", req.MountPath != ""}, {"sandbox", req.Sandbox != "" && !local},
		{"env", len(req.Env) > 0}, {"setup", req.Setup != ""}, {"network", len(req.Network) > 0}, {"system", req.System != ""},
		{"limits", req.Limits != api.Limits{}}, {"policy", req.Policy != ""}, {"completion_marker", req.CompletionMarker != nil},
		{"connectors", req.Connectors != nil}, {"no_connectors", req.NoConnectors}, {"team", req.Team},
	} {
		if f.set {
			set = append(set, f.name)
		}
	}
	return set
}

// admit checks a run.created payload against the server's rules before
// the server creates, forks or resumes the run for a caller: the caller
// may act as its principal, it runs in the server's sandbox and decides
// by the server's policy (unless an admin chose otherwise), its model is
// allowed, and its workspace is under a root (the demo's own excepted)
// and holds none of the server's files. It returns the workspace
// resolved. Errors are API errors.
//
// With validate, the run is also set up as an execution would set it up
// and torn down again (see validate).
func (s *Service) admit(ctx context.Context, a *admission, c *agent.RunCreated, validate bool) (string, error) {
	if a.existing != "" {
		if err := a.mayContinue(a.existing, c); err != nil {
			return "", err
		}
	}
	if err := a.mayActAs(c.Principal, c.OnBehalfOf); err != nil {
		return "", err
	}
	if err := s.checkSandbox(a, c.Sandbox); err != nil {
		return "", err
	}
	if err := s.checkPolicy(a, c.Policy); err != nil {
		return "", err
	}
	if _, err := s.checkModel(a, c.Model); err != nil {
		return "", err
	}
	// The command line on the journal's machine works wherever its
	// person says; every other caller under a workspace root.
	ws, err := s.conf.checkWorkspace(c.Workspace, !a.demoWorkspace && !a.who.Local)
	if err != nil {
		return "", err
	}
	if validate {
		if err := s.validate(ctx, c); err != nil {
			return "", s.invalid(err)
		}
	}
	return ws, nil
}

// validate sets a run up as an execution would (model client,
// workspace, sandbox with its network proxy, connectors) and tears it
// down, so that a run that cannot start is refused when it is created,
// forked or resumed rather than failing later; a new run with connectors
// gets its tools here, MCP ones pinned. A service that hands runs to
// workers sets up nothing when the tools are known: the worker that
// claims the run does (and fails its step, visibly, if it cannot), and
// this machine may have no sandbox at all.
func (s *Service) validate(ctx context.Context, c *agent.RunCreated) error {
	if s.opts.Builder == nil || s.opts.Dispatcher != nil && c.Tools != nil {
		return nil
	}
	if v, ok := s.opts.Builder.(Validator); ok {
		return v.Validate(ctx, c)
	}
	w, closer, err := s.opts.Builder.Wire(ctx, c)
	if err != nil {
		s.logger.Info("a run cannot be set up", "err", err)
		if errors.Is(err, sandbox.ErrUnavailable) {
			return errors.New("this server cannot sandbox commands (see its log)")
		}
		return badRequest("the run cannot be set up on this server: %s", APIText(err))
	}
	if c.Tools == nil {
		c.Tools = agent.ToolInfos(w.Tools)
	}
	if closer != nil {
		closer.Close()
	}
	return nil
}

// APIText returns an error's text for a caller with a token: without
// advice about the server process's flags, which the caller cannot pass,
// and on one line: its first line, with the lines of the cause when that
// one ends at a colon (a connection error lists its attempts indented
// below it).
func APIText(err error) string {
	str := err.Error()
	if i := strings.Index(str, "; pass --"); i >= 0 {
		str = str[:i]
	}
	first, rest, _ := strings.Cut(str, "\n")
	out := strings.TrimSpace(first)
	if !strings.HasSuffix(out, ":") {
		return out
	}
	var cause []string
	for _, l := range strings.Split(rest, "\n") {
		if l == "" || l == strings.TrimLeft(l, " \t") {
			break // not an indented line of the cause
		}
		cause = append(cause, strings.TrimSpace(l))
	}
	return strings.TrimSpace(out + " " + strings.Join(cause, "; "))
}

// executable checks, just before an execution, what no run may do in
// this server whoever started it: work in (or around) the server's own
// files, or run without the sandbox the server did not allow. A run that
// the API admitted must also still be under a workspace root (a
// directory of it may have been replaced by a symlink since).
func (s *Service) executable(c *agent.RunCreated) error {
	overrides := strings.Split(c.Labels[LabelOverride], ",")
	if c.Sandbox == "none" && s.sandboxKind() != "none" && !slices.Contains(overrides, "sandbox") {
		return errors.New("the run has no sandbox (sandbox none), which this server does not run unless an admin chose it through the API")
	}
	// A run started on the server's journal by another process (a local
	// keel run) is held to the roots too once the server executes it.
	// keel scheduler works for the journal's owner on their machine.
	if _, err := s.conf.checkWorkspace(c.Workspace, c.Labels[LabelDemo] == "" && !s.opts.OwnerOnly); err != nil {
		e, _ := Classify(err)
		return fmt.Errorf("%w: %s", errUnconfined, e.Message)
	}
	return nil
}

// foreign reports why the server leaves a run to the process that
// started it after a decision made through the API: the run was created
// outside the API (a keel run on the server's journal) and decides by
// another policy than the server's. The decision stays journaled.
func (s *Service) foreign(c *agent.RunCreated) error {
	if admitted(c) {
		return nil
	}
	if c.Policy != nil && c.Policy.SHA256 == s.policyRef.SHA256 {
		return nil
	}
	name := "none"
	if c.Policy != nil {
		name = c.Policy.Name
	}
	return fmt.Errorf("%w: it decides by another policy (%s) than the server's (%s)", errNotAdmitted, name, s.policyRef.Name)
}

// admitted reports whether run c was created through the server's API
// (or is a demo), and so was admitted by a server's checks; other runs
// were started on the journal by another process (keel run).
func admitted(c *agent.RunCreated) bool {
	return c.Labels[LabelCreatedBy] != "" || c.Labels[LabelDemo] != ""
}

// errNotAdmitted marks a run created outside the server's API (a keel run
// on its journal) that the API would not have admitted: the server leaves
// it paused for the process that started it.
var errNotAdmitted = errors.New("it was started outside this server (keel run on its journal) and is continued where it was started (keel runs resume RUN without --server)")

// errUnconfined marks a run whose workspace fails the confinement check
// at execution: the pool ends it failed (reason "setup") if the server
// admitted it, and leaves it to its starter otherwise (leftToStarter).
var errUnconfined = errors.New("its workspace is not allowed")

// invalid maps an error of the Builder (or a Validator) to an API
// error: those wrapping ErrInvalid are the request's fault (400, with
// their message); others are internal.
func (s *Service) invalid(err error) error {
	if errors.Is(err, ErrInvalid) {
		return badRequest("%s", strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
	}
	return err
}

// Invalid marks err as the request's fault (see [ErrInvalid]).
func Invalid(err error) error { return fmt.Errorf("%w: %w", ErrInvalid, err) }

// stamp records in c who created it and what an admin overrode.
func stamp(c *agent.RunCreated, a *admission) {
	labels := make(map[string]string, len(c.Labels)+3)
	for k, v := range c.Labels {
		labels[k] = v
	}
	delete(labels, LabelOverride)
	if a.who != nil && !a.who.Local {
		labels[LabelCreatedBy], labels[LabelCreatedByToken] = a.who.Name, a.who.ID
	}
	if len(c.SecretEnv) > 0 && !a.admin() {
		// The operator's secrets in a run whose creator is not the
		// operator: its output is a way out (docs/security.md). A fork
		// keeps the mark of its source whoever makes it.
		c.ForeignSecrets = true
	}
	if a.demo && labels[LabelDemo] == "" {
		labels[LabelDemo] = "the server's demo run"
	}
	if len(a.overrides) > 0 {
		labels[LabelOverride] = strings.Join(a.overrides, ",")
	}
	c.Labels = labels
}
