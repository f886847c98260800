package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/notify"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/schedule"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/trigger"
)

// Options configures [New]. The zero value is a service on a journal
// that executes no runs (a command line that continues runs in its own
// process, or a read-only front end).
type Options struct {
	// Builder completes new runs and builds the live parts of their
	// executions; nil means the service creates no runs of a request and
	// executes none (Create answers unavailable, decisions only journal).
	Builder Builder
	// SecretEnv names the variables of this process's environment that
	// runs created through the API or by schedules may ask for as
	// secrets (api.CreateRun.SecretEnv); others are refused.
	SecretEnv []string
	// SecretHosts are the variables of this process's environment that
	// runs created through the API may ask for as secrets the sandbox
	// never holds (api.CreateRun.SecretHosts), each bound by the
	// operator to its host (keel serve --secret-for-host NAME=HOST): a
	// run may ask for NAME with that host only, and with Body only where
	// the binding has it (keel serve --secret-in-body NAME). A name of
	// SecretEnv alone is not a secret for a host: the run's creator
	// would choose where the value goes.
	SecretHosts []agent.SecretHost
	// Getenv reads this process's environment for the values of a run's
	// secrets ([Service.RunSecrets]): the front ends hide them in what
	// they show of the run's files (a diff). Nil: no value is known, and
	// nothing is hidden.
	Getenv func(string) string
	// NoExecution makes a service that prepares, admits and journals but
	// executes nothing: the process that asks continues a run itself, in
	// the foreground (keel run, keel approve).
	NoExecution bool
	// Dispatcher, if set, hands the runs the service would execute to
	// other processes (keel serve --temporal: the cluster's workers);
	// Builder.Wire is then unused.
	Dispatcher Dispatcher
	// Workers bounds the runs executing at once in this process; 0 means
	// 4. Further runs queue in submission order.
	Workers int
	// Tokens are the API tokens; nil means [token.New] on the runtime's
	// store.
	Tokens *token.Set
	// Directory is the agent directory (the gate's principal checks,
	// agents, standing approvals); nil means identity.NewDirectory on the
	// runtime's store.
	Directory *identity.Directory
	// ExpiryInterval is how often the service looks for approvals whose
	// deadline passed, to apply their default decision; 0 means 10
	// seconds.
	ExpiryInterval time.Duration
	// Logger receives the service's log; nil discards it.
	Logger *slog.Logger
	// Clock gives the times of the service's own events; nil means
	// time.Now.
	Clock journal.Clock
	// Poll is how often the service re-reads a stream no in-process
	// append woke (the control stream, a run canceled elsewhere); 0
	// means one second.
	Poll time.Duration

	// WorkspaceRoots are the directories runs created or forked by
	// callers with a token may work in: a workspace must be one of them
	// or below one, symlinks resolved. Empty means such callers create no
	// run but the demo (whose workspace the service makes). See
	// docs/server.md.
	WorkspaceRoots []string
	// DemoDir is the directory in which the service makes the
	// workspaces of demo runs (a new directory keel-demo-NNN each, a
	// fresh copy of the demo project), made when missing; "" means the
	// system's temporary directory. It need not be under a workspace
	// root, and may be inside a Protected path (keel serve's is
	// $KEEL_HOME/demos): a copy right in it is the service's own.
	DemoDir string
	// Protected are paths no run's workspace may be, be inside, or
	// contain, whoever asks: Keel's home directory, files holding the
	// server's secrets or configuration.
	Protected []string
	// JournalFiles are the journal's files (the database and the files
	// beside it: -wal, -shm, the lock directory): no run's workspace may
	// be or contain one.
	JournalFiles []string
	// Sandbox is the sandbox every run uses: "linux" (the default) or
	// "none". A caller with a token may not ask for less isolation.
	Sandbox string
	// AllowSandboxOverride lets admin tokens ask for runs without
	// isolation (sandbox none); the override is journaled in run.created
	// ([LabelOverride]). No other token can, ever.
	AllowSandboxOverride bool
	// Skills is where the service finds the skills runs are offered and
	// installs skills ([Service.Skills], [Service.InstallSkill]); nil:
	// the service lists none and installs none.
	Skills SkillHost
	// Evals is where the service finds evaluations ([Service.Evals]);
	// nil: it has none.
	Evals EvalHost
	// Policy is the service's policy: runs decide by it unless their
	// request names another (only admin tokens and the local command line
	// may). nil means policy.Default().
	Policy *policy.Engine
	// ReplayDirs are the directories "replay:" model specs of non-admin
	// tokens may name recordings in. Empty: only admin tokens may use
	// replay models.
	ReplayDirs []string
	// DefaultModel is the model spec runs get when they name none; ""
	// means none.
	DefaultModel string
	// ModelBaseURLs are the base URLs "openai-compatible:" model specs of
	// non-admin tokens may name (the server would send them its API
	// key). Empty: only admin tokens may name such endpoints.
	ModelBaseURLs []string
	// Settings are the execution settings of the runs the service
	// creates when a request gives none; the zero value means
	// [agent.DefaultSettings].
	Settings agent.Settings
	// NoCheckpoints takes no workspace checkpoints for the runs the
	// service creates (a request may turn them off, never on).
	NoCheckpoints bool
	// Adopt is how often the service looks for runs that should be
	// executing but whose lease no process holds (their process died),
	// and executes them; 0 means never (only Start does, once). Set it
	// when several servers share the journal (see cluster.go).
	Adopt time.Duration
	// CancelWait bounds how long a cancel of a run that another process
	// executes waits for that process to record it; 0 means 30 seconds.
	CancelWait time.Duration
	// Vault, if set with PublicURL, lets people authorize the calls that
	// wait in auth.required ([Service.BeginConnect]); the authorization
	// server redirects the browser to PublicURL + [CallbackPath].
	Vault Connector
	// PublicURL is the base URL browsers reach the server at
	// ("https://keel.example.com").
	PublicURL string

	// OwnerOnly marks a service that works for its journal's owner on
	// their machine (keel scheduler): the runs it executes are not held
	// to the workspace roots, which still bound what callers with a token
	// create.
	OwnerOnly bool

	// Sinks are the notification sinks schedules, triggers and agents
	// name (docs/schedules.md); none: no notifications.
	Sinks map[string]notify.Sink
	// AgentSinks names, by agent, the sinks told about every run of the
	// agent that waits for a person or fails.
	AgentSinks map[string][]string
	// Sealer keeps the signing secrets of webhook triggers sealed under
	// the vault key (*credential.Vault); nil: no webhook triggers.
	Sealer trigger.Secrets
	// ScheduleDriver, if set, times the fires of new schedules
	// elsewhere (keel serve --temporal: Temporal Schedules); the
	// service keeps it in step with the journal's schedules.
	ScheduleDriver ScheduleDriver
	// OnFire, if set, is told of every fire record the service's
	// scheduler makes (schedule.Metrics.Observe: metrics per schedule).
	OnFire func(*schedule.Schedule, *schedule.Fire)
	// UnattendedInterval is how often [Service.Start]'s loops look at
	// the schedules, the triggers and what waits for a person; 0 means
	// 5 seconds.
	UnattendedInterval time.Duration
}

// Builder is what the service needs of the machine it runs on to make
// and execute runs. Keel's is internal/assemble's, configured by the
// command line from flags, config.toml and the environment.
type Builder interface {
	// Model checks that runs of model spec can be made here (a spec it
	// understands, its API key, a replay's recording) and returns what
	// the model brings.
	// Errors wrapped in [ErrInvalid] are the request's fault.
	Model(ctx context.Context, spec string) (*ModelInfo, error)
	// Complete fills in a new run's run.created what depends on the
	// machine and its operator's configuration: the context window and
	// memory files (family is the model's name for the family table),
	// the connectors, the tools, the state directory and the git state.
	// c holds what the request and the service's defaults give; errors
	// wrapped in [ErrInvalid] are the request's fault.
	Complete(ctx context.Context, c *agent.RunCreated, req *CreateRun, family string) error
	// Wire builds the live parts of one execution of the run c
	// describes (an [agent.WireFunc]).
	Wire(ctx context.Context, c *agent.RunCreated) (*agent.Wiring, io.Closer, error)
}

// Validator is implemented by a builder that checks a run cheaper than
// [Builder.Wire] does: the service then calls Validate instead of wiring
// the run and tearing it down when it admits a creation, a fork or a
// resume.
type Validator interface {
	Validate(ctx context.Context, c *agent.RunCreated) error
}

// Dispatcher hands runs to other processes that execute them (the
// cluster's workers; *cluster.Dispatcher). With one, the service's pool
// queues runs as before and hands each over instead of executing it.
type Dispatcher interface {
	// Dispatch hands runID to the workers.
	Dispatch(ctx context.Context, runID string) error
	// Adopt hands over a run the service adopted (running, no lease
	// held, quiet for a while): it wakes the run's workflow only when it
	// has no step pending.
	Adopt(ctx context.Context, runID string) error
}

// ErrInvalid marks an error of [Builder.Complete] that is the request's
// fault.
var ErrInvalid = errors.New("service: invalid request")

// Service is the operations every front end of Keel shares: creating,
// resuming, canceling, forking and rewinding runs, deciding approvals,
// answering inputs, authorizing calls, listing and showing runs, agents
// and tokens; the admission and confinement of what callers ask for;
// the defaults and checks of limits and settings; and the executor
// (a pool of workers in this process, or the cluster's through a
// [Dispatcher]). Call [Service.Start] to resume runs a previous stop
// interrupted, and [Service.Shutdown] to pause executions cleanly. It is
// safe for concurrent use.
type Service struct {
	rt      *agent.Runtime
	opts    Options
	pool    *pool
	live    *liveHub
	sums    *summaries
	index   *runsIndex
	tokens  *token.Set
	actions *journal.Stream
	control *journal.Stream
	logger  *slog.Logger
	conf    *confinement
	// policyRef and demoPolicyRef identify the service's policy and the
	// demo's, as runs record them.
	policyRef, demoPolicyRef *agent.PolicyRef
	// policyLint is what policy.Engine.Lint finds in the service's
	// policy (lintPolicy), found once.
	policyLint func() []string
	// leftAlone holds the ids of the runs this server leaves to the
	// process that started them (leaves), so that it says so once.
	leftAlone sync.Map

	// idleWait, if set, is called when a resume starts waiting for an
	// execution that is ending (tests).
	idleWait func(runID string)
	// adoptSwept, if set, is called after each adoption sweep with the
	// number of runs it submitted (tests).
	adoptSwept func(n int)

	// sched, hub and notifier are the schedules, triggers and
	// notifications (schedules.go, triggers.go, notify.go).
	sched    *schedule.Scheduler
	hub      *trigger.Hub
	notifier *notify.Notifier
	// memoryState is memory across runs (memory.go).
	memoryState

	stopOnce sync.Once
	stop     chan struct{} // closed by Shutdown
	sweeping sync.WaitGroup
}

// New returns the service of rt. opts may be nil. The worker pool starts
// at once (idle until runs are submitted).
func New(rt *agent.Runtime, opts *Options) *Service {
	s := &Service{rt: rt}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Workers <= 0 {
		s.opts.Workers = 4
	}
	if s.opts.Clock == nil {
		s.opts.Clock = time.Now
	}
	if s.opts.Poll <= 0 {
		s.opts.Poll = time.Second
	}
	s.logger = s.opts.Logger
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	s.tokens = s.opts.Tokens
	if s.tokens == nil {
		s.tokens = token.New(rt.Store(), &token.Options{Clock: s.opts.Clock})
	}
	if s.opts.Directory == nil {
		s.opts.Directory = identity.NewDirectory(rt.Store(), &identity.Options{Clock: s.opts.Clock})
	}
	if s.opts.ExpiryInterval <= 0 {
		s.opts.ExpiryInterval = 10 * time.Second
	}
	if s.opts.Policy == nil {
		s.opts.Policy = policy.Default()
	}
	if s.opts.Settings == (agent.Settings{}) {
		s.opts.Settings = agent.DefaultSettings()
	}
	s.policyRef, s.demoPolicyRef = agent.NewPolicyRef(s.opts.Policy), agent.NewPolicyRef(DemoPolicy())
	s.policyLint = sync.OnceValue(func() []string { return s.opts.Policy.Lint(context.Background()) })
	s.conf = newConfinement(&s.opts)
	s.stop = make(chan struct{})
	s.sums = newSummaries(rt.Store())
	s.index = &runsIndex{store: rt.Store()}
	s.actions = journal.NewStream(rt.Store(), ActionStream, s.opts.Clock, func(*journal.Event) error { return nil })
	s.control = journal.NewStream(rt.Store(), ControlStream, s.opts.Clock, func(*journal.Event) error { return nil })
	var wire agent.WireFunc = func(context.Context, *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
		return nil, nil, errors.New("this process executes no runs (no builder configured)")
	}
	if s.opts.Builder != nil {
		wire = s.opts.Builder.Wire
	}
	workers := s.opts.Workers
	if !s.executes() {
		workers = 0 // nothing to execute: no goroutines
	}
	s.pool = newPool(rt, wire, principals(s.opts.Directory), s.sums, s.executable, workers, s.logger)
	s.live = newLiveHub()
	s.pool.live = s.live
	s.pool.dispatcher = s.opts.Dispatcher
	s.pool.leftToStarter = s.leftToStarter
	s.pool.inert = !s.executes()
	s.newUnattended()
	return s
}

// executes reports whether the service executes runs (in this process,
// or through its dispatcher): a service with neither only journals, and
// the process that asked continues the run itself.
func (s *Service) executes() bool {
	return !s.opts.NoExecution && (s.opts.Builder != nil || s.opts.Dispatcher != nil)
}

// Runtime returns the service's runtime.
func (s *Service) Runtime() *agent.Runtime { return s.rt }

// Tokens returns the service's API tokens.
func (s *Service) Tokens() *token.Set { return s.tokens }

// Directory returns the service's agent directory.
func (s *Service) Directory() *identity.Directory { return s.opts.Directory }

// Clock returns the service's clock.
func (s *Service) Clock() journal.Clock { return s.opts.Clock }

// Caller is who asks for an operation: a person with an API token (the
// team server's API and web UI, Keel's MCP server at /mcp), or the person
// at the command line of the journal's machine ([Local]), who owns the
// journal: what a token may not do (work outside the workspace roots,
// choose another policy or no sandbox) is theirs to decide.
type Caller struct {
	api.Token
	// Local marks the command line on the journal's machine.
	Local bool
}

// Local returns the caller of the command line on the journal's
// machine, the person named name.
func Local(name string) *Caller { return &Caller{Token: api.Token{Name: name}, Local: true} }

// As returns the caller holding token t.
func As(t *api.Token) *Caller { return &Caller{Token: *t} }

// admin reports whether who may do what only an admin may.
func (who *Caller) admin() bool {
	return who != nil && (who.Local || token.HasScope(&who.Token, api.ScopeAdmin))
}

// Start submits for execution every run that was executing when the
// server (or another process) stopped: runs that are running by their
// folded state (their newest event is neither an end nor a pause, and
// they wait for no approval), and runs paused by a shutdown. Runs paused
// for an approval stay paused until someone decides, and forks that were
// not started stay so (also those made before forks were journaled
// paused: a fork with no event past its fork point). Then, until
// Shutdown, it applies approval deadlines, follows cancel requests, and
// runs the schedules, triggers and notifications (docs/schedules.md). It
// returns the ids submitted, oldest first.
func (s *Service) Start(ctx context.Context) ([]string, error) {
	ids, err := s.orphans(ctx, time.Time{}, nil)
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		if err := s.pool.submit(id); err != nil {
			return ids[:i], err
		}
	}
	if len(ids) > 0 {
		s.logger.Info("resuming interrupted runs", "runs", len(ids))
	}
	s.sweeping.Add(2)
	go s.sweep()
	go s.followControl()
	if s.opts.Adopt > 0 {
		s.sweeping.Add(1)
		go s.adopt()
	}
	s.sweeping.Add(1)
	go s.runUnattended()
	return ids, nil
}

// orphans returns, oldest first, the runs that should be executing (see
// Start) but that no process executes: neither this server (queued or
// executing here) nor another holding the run's lease. With a non-zero
// before, only runs whose newest event is older count (a run another
// server just created is about to take its lease).
//
// skip, if not nil, is asked before the lease of a run is looked up
// (seq is the run's newest event): a run it skips is not returned.
func (s *Service) orphans(ctx context.Context, before time.Time, skip func(id string, seq int64) bool) ([]string, error) {
	runs, err := s.rt.Store().Runs(ctx, &journal.ListParams{Status: []journal.Status{journal.StatusRunning, journal.StatusPaused}})
	if err != nil {
		return nil, fmt.Errorf("server: start: %w", err)
	}
	var ids []string
	for _, r := range slices.Backward(runs) {
		if journal.IsSystem(r.RunID) {
			continue
		}
		if !before.IsZero() && !r.Updated.Before(before) {
			continue
		}
		if queued, executing, _ := s.pool.state(r.RunID); queued || executing {
			continue
		}
		sum, err := s.sums.get(ctx, r.RunID, r.LastSeq)
		if err != nil || len(sum.Pending) > 0 {
			continue
		}
		if sum.Status == string(journal.StatusPaused) && sum.Reason != "shutdown" {
			continue
		}
		if _, at, ok := strings.Cut(sum.ForkOf, "@"); ok && at == strconv.FormatInt(sum.Events, 10) {
			// A fork that never executed: made without start by a server
			// that did not yet journal such forks paused (ReasonForked).
			continue
		}
		if skip != nil && skip(r.RunID, r.LastSeq) {
			continue
		}
		if !s.leaseFree(ctx, r.RunID) {
			continue // another process executes it
		}
		if s.leaves(ctx, r.RunID) {
			continue // before anything is journaled in it
		}
		ids = append(ids, r.RunID)
	}
	return ids, nil
}

// sweep applies approval deadlines every ExpiryInterval until Shutdown.
func (s *Service) sweep() {
	defer s.sweeping.Done()
	t := time.NewTicker(s.opts.ExpiryInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if _, err := s.ExpireApprovals(context.Background()); err != nil {
				s.logger.Error("apply approval deadlines", "err", err)
			}
			if _, err := s.ResumeAuthorized(context.Background()); err != nil {
				s.logger.Error("resume authorized runs", "err", err)
			}
		}
	}
}

// ExpireApprovals submits for execution every run with an approval whose
// deadline (approval.requested's expires) has passed, so that its
// executor journals the default decision and goes on. [Service.Start]
// runs it every [Options.ExpiryInterval]. It returns the runs submitted.
func (s *Service) ExpireApprovals(ctx context.Context) ([]string, error) {
	list, err := s.approvals(ctx)
	if err != nil {
		return nil, err
	}
	now := s.opts.Clock()
	var ids []string
	for _, a := range list {
		if a.Expires == nil || now.Before(*a.Expires) || slices.Contains(ids, a.RunID) {
			continue
		}
		if s.leaves(ctx, a.RunID) {
			// The process that continues it applies the deadline.
			continue
		}
		if err := s.pool.submit(a.RunID); err != nil && !errors.Is(err, errCanceling) {
			return ids, err
		}
		ids = append(ids, a.RunID)
	}
	return ids, nil
}

// ResumeAuthorized submits every run whose newest event is
// auth.resolved: a person authorized what it waited for, with keel auth
// connect in another process sharing the journal. [Service.Start] runs it
// every [Options.ExpiryInterval]. It returns the runs submitted.
func (s *Service) ResumeAuthorized(ctx context.Context) ([]string, error) {
	runs, err := s.rt.Store().Runs(ctx, &journal.ListParams{Status: []journal.Status{journal.StatusRunning}})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, r := range runs {
		if r.LastType != journal.AuthResolved || s.leaves(ctx, r.RunID) {
			continue
		}
		if err := s.pool.submit(r.RunID); err != nil && !errors.Is(err, errCanceling) {
			return ids, err
		}
		ids = append(ids, r.RunID)
	}
	return ids, nil
}

// Shutdown stops taking work and pauses every executing run: each
// execution is canceled with cause [agent.ErrShutdown], so its executor
// journals run.paused (never a torn state) and the next [Service.Start]
// resumes it. It waits for the executions until ctx is done. Stop the
// HTTP server first (http.Server.Shutdown) so no request submits more
// work; event streams end when their requests' contexts do.
func (s *Service) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stop) })
	s.sweeping.Wait()
	return s.pool.shutdown(ctx)
}

// principals is the gate's principal check of the server's runs: the
// directory's, except that the shared demo agent has no standing
// approvals here (every token may start demo runs, so one person's
// remembered approval would skip the approval of everyone's demo; the
// API refuses to make such grants, and this ignores older ones).
func principals(d *identity.Directory) policy.PrincipalCheck {
	return func(ctx context.Context, principal, onBehalfOf string) ([]policy.Grant, error) {
		grants, err := d.Check(ctx, principal, onBehalfOf)
		if credential.Owner(principal) == identity.DemoAgent {
			grants = nil
		}
		return grants, err
	}
}

// action is the payload of an api.action event in [ActionStream].
type action struct {
	// By is the token's name (the person); Token its id.
	By     string `json:"by"`
	Token  string `json:"token"`
	Action string `json:"action"`
	RunID  string `json:"run_id,omitempty"`
	CallID string `json:"call_id,omitempty"`
	Target string `json:"target,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Remember and Prefix are an approval's remembered scope and stated
	// word prefix (api.Decide).
	Remember string   `json:"remember,omitempty"`
	Prefix   []string `json:"prefix,omitempty"`
}

// record journals a state-changing API action with who did it. A failure
// to record is logged and returned: the action happened, but the caller
// should know the record is missing.
func (s *Service) record(ctx context.Context, who *Caller, a action) error {
	if who != nil && who.Local {
		return nil // the API's log: the command line's actions are in the runs' journals
	}
	if who != nil {
		a.By, a.Token = who.Name, who.ID
	}
	if _, err := s.actions.Append(ctx, APIAction, &a, nil); err != nil {
		s.logger.Error("record api action", "action", a.Action, "err", err)
		return err
	}
	return nil
}

// OnIdleWait sets f to be called when a resume of a run starts waiting
// for the run's ending execution: a hook for tests of the front ends,
// which cannot otherwise see that moment. Set it before the service is
// used.
func OnIdleWait(s *Service, f func(runID string)) { s.idleWait = f }
