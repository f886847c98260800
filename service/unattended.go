package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/schedule"
	"github.com/keel-run/keel/server/api"
)

// Runs nobody starts by hand: a schedule's fires and a trigger's
// deliveries create their runs through the service's own create, with
// the run id the fire or delivery names (so a retry on another server,
// or after a crash, never makes a second run), with the rights of the
// person who set the schedule or trigger up, and labelled with what
// started them.

// fireRunner is the [schedule.Runner] of the service's schedules and
// triggers.
type fireRunner struct{ s *Service }

var _ schedule.Runner = fireRunner{}

// schedulerName is who cancels runs for a schedule's overlap policy.
const schedulerName = "keel.scheduler"

// Start implements [schedule.Runner]: the service's create with the
// caller-chosen run id.
func (r fireRunner) Start(ctx context.Context, p *schedule.StartParams) error {
	s := r.s
	who, err := s.owner(ctx, p.Owner)
	if err != nil {
		return err
	}
	var req api.CreateRun
	if len(p.Run) > 0 {
		if err := json.Unmarshal(p.Run, &req); err != nil {
			return fmt.Errorf("%w: the runs' request does not read: %v", schedule.ErrPermanent, err)
		}
	}
	req.Task, req.Agent, req.OnBehalfOf = p.Task, p.Agent, p.OnBehalfOf
	_, err = s.create(ctx, &CreateRun{CreateRun: req, ID: p.RunID, origin: &origin{labels: p.Labels, input: p.Input}}, who)
	var se *Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrExists):
		return fmt.Errorf("%w: %s", schedule.ErrRunExists, p.RunID)
	case errors.As(err, &se) && (se.Code == api.CodeInvalidRequest || se.Code == api.CodeForbidden || se.Code == api.CodeNotFound):
		// The agent was revoked, the workspace is gone, the model is no
		// longer allowed: retrying changes nothing.
		return fmt.Errorf("%w: %s", schedule.ErrPermanent, se.Message)
	}
	return err
}

// Status implements [schedule.Runner].
func (r fireRunner) Status(ctx context.Context, runID string) (journal.Status, error) {
	run, err := r.s.run(ctx, runID, 0)
	var se *Error
	if errors.As(err, &se) && se.Code == api.CodeNotFound {
		return "", fmt.Errorf("%w: %s", journal.ErrNotFound, runID)
	}
	if err != nil {
		return "", err
	}
	return journal.Status(run.Status), nil
}

// Cancel implements [schedule.Runner] (cancel_other, terminate_other).
func (r fireRunner) Cancel(ctx context.Context, runID, reason string) error {
	_, err := r.s.Cancel(ctx, Local(schedulerName), runID)
	return err
}

// ownerOf names whose rights the runs of a schedule or trigger who sets
// up are created with.
func ownerOf(who *Caller) string {
	if who.Local {
		return "local:" + who.Name
	}
	return "token:" + who.ID
}

// owner returns the caller a schedule's or trigger's runs are created
// as: the API token of its creator as it is now (a revoked one fails the
// fire for good), or the journal's owner at the command line.
func (s *Service) owner(ctx context.Context, owner string) (*Caller, error) {
	kind, name, _ := strings.Cut(owner, ":")
	switch kind {
	case "local", "":
		return Local(name), nil
	case "token":
		list, err := s.tokens.List(ctx)
		if err != nil {
			return nil, err
		}
		for i := range list {
			if list[i].ID != name {
				continue
			}
			if list[i].Revoked != nil {
				return nil, fmt.Errorf("%w: the API token %s (%s) that set this up was revoked: create it again with a valid token", schedule.ErrPermanent, name, list[i].Name)
			}
			return As(&list[i]), nil
		}
		return nil, fmt.Errorf("%w: the API token %s that set this up does not exist", schedule.ErrPermanent, name)
	}
	return nil, fmt.Errorf("%w: unknown owner %q", schedule.ErrPermanent, owner)
}

// origin is what a schedule or trigger adds to the runs it creates:
// labels of Keel's own (which no request may set), and untrusted input.
type origin struct {
	labels map[string]string
	input  *schedule.Input
}

// unattended is what admission found of a schedule's or trigger's runs.
type unattended struct {
	agent, onBehalfOf string
	// run is the runs' request as kept (without task, agent and user).
	run       json.RawMessage
	providers []string
}

// admitUnattended checks the runs a schedule or trigger (what) will
// create for who: the request as a creation of who would be checked now
// (with the task template standing for the task), the notification
// sinks named, and that a call that asks has somebody to answer: sinks
// (the setup's or the agent's) or an approval timeout with a default.
func (s *Service) admitUnattended(ctx context.Context, who *Caller, what string, run *api.CreateRun, sinks []string) (*unattended, error) {
	if run.Demo {
		return nil, badRequest("%s: its runs cannot be the demo run", what)
	}
	for _, k := range sinks {
		if s.opts.Sinks[k] == nil {
			have := "none is defined"
			if names := s.sinkNames(); len(names) > 0 {
				have = "defined: " + strings.Join(names, ", ")
			}
			return nil, badRequest("%s: no notification sink named %q (%s; define one as [notify.sinks.%s] in config.toml, see docs/schedules.md)", what, k, have, k)
		}
	}
	req := *run
	req.Labels = maps.Clone(run.Labels)
	// The check makes no run: it offers no memory or skills (their
	// refusals concern each fire's run, and are said then).
	probe := req
	probe.NoMemory, probe.NoSkills = true, true
	c, _, err := s.prepareAdmitted(ctx, who, &CreateRun{CreateRun: probe}, false)
	if err != nil {
		return nil, err
	}
	eng, err := s.policyOf(ctx, req.Policy, req.PolicyFile)
	if err != nil {
		return nil, err
	}
	var timeout time.Duration
	if c.Approval != nil {
		timeout = c.Approval.Timeout.D()
	}
	told := append(slices.Clone(sinks), s.opts.AgentSinks[c.Principal]...)
	if err := schedule.CheckUnattended(what, eng, timeout, told); err != nil {
		return nil, badRequest("%s", strings.TrimPrefix(err.Error(), schedule.ErrInvalid.Error()+": "))
	}
	// Keep the request as admitted (the agent a bound token implies, a
	// replay resolved), without what the schedule or trigger fills in.
	req.Agent, req.OnBehalfOf = c.Principal, c.OnBehalfOf
	u := &unattended{agent: req.Agent, onBehalfOf: req.OnBehalfOf}
	req.Task, req.Agent, req.OnBehalfOf = "", "", ""
	if u.run, err = json.Marshal(&req); err != nil {
		return nil, err
	}
	for _, o := range c.OpenAPI {
		if o.Provider != "" && !slices.Contains(u.providers, o.Provider) {
			u.providers = append(u.providers, o.Provider)
		}
	}
	return u, nil
}

// agentGrant is a credential of the vault as schedules' warnings need
// it.
type agentGrant struct {
	Agent, User string
	schedule.Grant
}

// vaultGrants returns the vault's grants (none without a vault that lists
// them).
func (s *Service) vaultGrants(ctx context.Context) []agentGrant {
	l, ok := s.opts.Vault.(interface {
		Grants(ctx context.Context) ([]credential.Grant, error)
	})
	if !ok {
		return nil
	}
	list, err := l.Grants(ctx)
	if err != nil {
		s.logger.Warn("list the vault's grants", "err", err)
		return nil
	}
	out := make([]agentGrant, 0, len(list))
	for _, g := range list {
		out = append(out, agentGrant{Agent: g.Agent, User: g.User, Grant: schedule.Grant{Provider: g.Provider, Status: g.Status, Expiry: g.Expiry,
			Refreshable: g.RefreshHash != "" || g.Via == "client_credentials"}})
	}
	return out
}

// runUnattended runs the schedules, triggers and notifications of the
// service until Shutdown: the scheduler's ticks, the run triggers'
// watch and the deliveries' timeouts, the notifier, and the schedule
// driver's periodic sync.
func (s *Service) runUnattended() {
	defer s.sweeping.Done()
	ctx, cancel := s.stopContext()
	defer cancel()
	done := make(chan struct{})
	n := 1
	if s.executes() {
		n += 2
		go func() { s.sched.Run(ctx); done <- struct{}{} }()
		go func() { s.tickTriggers(ctx); done <- struct{}{} }()
	}
	go func() { s.notifier.Run(ctx); done <- struct{}{} }()
	for range n {
		<-done
	}
}

// tickTriggers ticks the triggers (and syncs the schedule driver) every
// UnattendedInterval until ctx ends.
func (s *Service) tickTriggers(ctx context.Context) {
	t := time.NewTicker(s.unattendedInterval())
	defer t.Stop()
	synced := time.Time{}
	for {
		if err := s.hub.Tick(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("triggers: tick", "err", err)
		}
		if now := time.Now(); s.opts.ScheduleDriver != nil && now.Sub(synced) >= time.Minute {
			s.syncSchedules(ctx, nil)
			synced = now
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Service) unattendedInterval() time.Duration {
	if s.opts.UnattendedInterval > 0 {
		return s.opts.UnattendedInterval
	}
	return 5 * time.Second
}

// apply adds what a schedule or trigger gives to the run.created c that
// the service prepared (nothing for o nil).
func (o *origin) apply(c *agent.RunCreated) {
	if o == nil {
		return
	}
	labels := maps.Clone(c.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, o.labels)
	c.Labels = labels
}
