package service

import (
	"context"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// Session is the service as one caller sees it, with the signatures of
// the Go client (package client) for the same operations: a front end
// written once over both (Keel's command line, on the local journal or,
// with --server, on a team server) holds a Session where it would hold
// a *client.Client, and the two cannot drift apart. Its errors are the
// service's (*Error), as the client's are the API's (*api.Error), with
// the same codes.
type Session struct {
	svc *Service
	who *Caller
}

// For returns the service as who sees it.
func (s *Service) For(who *Caller) *Session { return &Session{svc: s, who: who} }

// Service returns the session's service.
func (x *Session) Service() *Service { return x.svc }

// Caller returns who the session acts for.
func (x *Session) Caller() *Caller { return x.who }

// ref is the client's result shape: a pointer, nil with an error.
func ref[T any](v T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// Runs, approvals, inputs and audit.

// Run is run id with its folded status.
func (x *Session) Run(ctx context.Context, id string) (*api.Run, error) {
	return ref(x.svc.Run(ctx, x.who, id))
}

func (x *Session) Runs(ctx context.Context, p *api.RunsParams) ([]api.Run, error) {
	q := &ListRuns{}
	if p != nil {
		q.Limit = p.Limit
		for _, st := range p.Status {
			q.Status = append(q.Status, journal.Status(st))
		}
	}
	return x.svc.Runs(ctx, x.who, q)
}

func (x *Session) ProposedEdit(ctx context.Context, id, callID string) (*api.ProposedEdit, error) {
	return ref(x.svc.ProposedEdit(ctx, x.who, id, callID))
}

func (x *Session) Approvals(ctx context.Context) ([]api.Approval, error) {
	return x.svc.Approvals(ctx, x.who)
}

func (x *Session) Inputs(ctx context.Context) ([]api.Input, error) { return x.svc.Inputs(ctx, x.who) }

func (x *Session) AnswerInput(ctx context.Context, runID, id string, req *api.AnswerInput) (*api.Run, error) {
	return ref(x.svc.Answer(ctx, x.who, runID, id, req))
}

func (x *Session) VerifyAudit(ctx context.Context, req *api.VerifyAudit) (*api.AuditReport, error) {
	if req == nil {
		req = &api.VerifyAudit{}
	}
	return x.svc.Audit(ctx, x.who, req.Runs)
}

func (x *Session) Artifact(ctx context.Context, id, rel string) ([]byte, error) {
	return x.svc.Artifact(ctx, x.who, id, rel)
}

func (x *Session) Rewind(ctx context.Context, id string, req *api.RewindRun) (*api.Rewound, error) {
	return x.svc.Rewind(ctx, x.who, id, req)
}

func (x *Session) Fork(ctx context.Context, id string, req *api.ForkRun) (*api.Run, error) {
	return ref(x.svc.Fork(ctx, x.who, id, req))
}

// Schedules.

func (x *Session) CreateSchedule(ctx context.Context, req *api.CreateSchedule) (*api.Schedule, error) {
	return ref(x.svc.CreateSchedule(ctx, x.who, req))
}

func (x *Session) Schedules(ctx context.Context) ([]api.Schedule, error) {
	return x.svc.Schedules(ctx, x.who)
}

func (x *Session) Schedule(ctx context.Context, id string) (*api.Schedule, error) {
	return ref(x.svc.Schedule(ctx, x.who, id))
}

func (x *Session) Fires(ctx context.Context, id string, p *api.FiresParams) ([]api.Fire, error) {
	return x.svc.Fires(ctx, x.who, id, p)
}

func (x *Session) PauseSchedule(ctx context.Context, id, reason string) (*api.Schedule, error) {
	return ref(x.svc.PauseSchedule(ctx, x.who, id, reason))
}

func (x *Session) ResumeSchedule(ctx context.Context, id string) (*api.Schedule, error) {
	return ref(x.svc.ResumeSchedule(ctx, x.who, id))
}

func (x *Session) TriggerSchedule(ctx context.Context, id string, req *api.TriggerSchedule) (*api.Fire, error) {
	return ref(x.svc.TriggerSchedule(ctx, x.who, id, req))
}

func (x *Session) BackfillSchedule(ctx context.Context, id string, req *api.Backfill) ([]api.Fire, error) {
	return x.svc.BackfillSchedule(ctx, x.who, id, req)
}

func (x *Session) DeleteSchedule(ctx context.Context, id string) error {
	return x.svc.DeleteSchedule(ctx, x.who, id)
}

// Triggers.

func (x *Session) CreateTrigger(ctx context.Context, req *api.CreateTrigger) (*api.NewTrigger, error) {
	return ref(x.svc.CreateTrigger(ctx, x.who, req))
}

func (x *Session) Triggers(ctx context.Context) ([]api.Trigger, error) {
	return x.svc.Triggers(ctx, x.who)
}

func (x *Session) Trigger(ctx context.Context, id string) (*api.Trigger, error) {
	return ref(x.svc.Trigger(ctx, x.who, id))
}

func (x *Session) Deliveries(ctx context.Context, id string, last int) ([]api.Delivery, error) {
	return x.svc.Deliveries(ctx, x.who, id, last)
}

func (x *Session) PauseTrigger(ctx context.Context, id, reason string) (*api.Trigger, error) {
	return ref(x.svc.PauseTrigger(ctx, x.who, id, reason))
}

func (x *Session) ResumeTrigger(ctx context.Context, id string) (*api.Trigger, error) {
	return ref(x.svc.ResumeTrigger(ctx, x.who, id))
}

func (x *Session) DeleteTrigger(ctx context.Context, id string) error {
	return x.svc.DeleteTrigger(ctx, x.who, id)
}

// Memory and skills.

func (x *Session) Memory(ctx context.Context, p *api.MemoryParams) ([]api.MemoryEntry, error) {
	return x.svc.Memory(ctx, x.who, p)
}

func (x *Session) MemoryEntry(ctx context.Context, id string) (*api.MemoryHistory, error) {
	return ref(x.svc.MemoryEntry(ctx, x.who, id))
}

func (x *Session) EditMemory(ctx context.Context, id, text string) (*api.MemoryEntry, error) {
	return ref(x.svc.EditMemory(ctx, x.who, id, text))
}

func (x *Session) ForgetMemory(ctx context.Context, id, reason string) error {
	return x.svc.ForgetMemory(ctx, x.who, id, reason)
}

func (x *Session) SkillCandidates(ctx context.Context) ([]api.SkillCandidate, error) {
	return x.svc.SkillCandidates(ctx, x.who)
}

func (x *Session) Skills(ctx context.Context, ws string) (*api.SkillList, error) {
	return ref(x.svc.Skills(ctx, x.who, ws))
}

func (x *Session) Skill(ctx context.Context, ws, name string) (*api.SkillDetail, error) {
	return ref(x.svc.Skill(ctx, x.who, ws, name))
}

func (x *Session) InstallSkill(ctx context.Context, req *api.InstallSkill) (*api.Skill, error) {
	return ref(x.svc.InstallSkill(ctx, x.who, req))
}

// Cost.

func (x *Session) Cost(ctx context.Context, by, since string) (*api.CostReport, error) {
	return x.svc.Cost(ctx, x.who, by, since)
}

// Evaluations.

func (x *Session) Evals(ctx context.Context) (*api.EvalList, error) {
	return ref(x.svc.Evals(ctx, x.who))
}

// Agents and tokens.

func (x *Session) Agents(ctx context.Context) ([]api.Agent, error) { return x.svc.Agents(ctx, x.who) }

func (x *Session) CreateAgent(ctx context.Context, req *api.CreateAgent) (*api.Agent, error) {
	return ref(x.svc.CreateAgent(ctx, x.who, req))
}

func (x *Session) RevokeAgent(ctx context.Context, name, reason string) (*api.Agent, error) {
	return ref(x.svc.RevokeAgent(ctx, x.who, name, reason))
}

func (x *Session) RestoreAgent(ctx context.Context, name, reason string) (*api.Agent, error) {
	return ref(x.svc.RestoreAgent(ctx, x.who, name, reason))
}

func (x *Session) Grants(ctx context.Context, name string) (*api.GrantList, error) {
	return ref(x.svc.Grants(ctx, x.who, name))
}

func (x *Session) Ungrant(ctx context.Context, name, grant, reason string) (*api.GrantList, error) {
	return ref(x.svc.RevokeGrant(ctx, x.who, name, grant, reason))
}

func (x *Session) Tokens(ctx context.Context) ([]api.Token, error) {
	return x.svc.TokenList(ctx, x.who)
}

func (x *Session) CreateToken(ctx context.Context, req *api.CreateToken) (*api.NewToken, error) {
	return x.svc.CreateToken(ctx, x.who, req)
}

func (x *Session) RevokeToken(ctx context.Context, id string) (*api.Token, error) {
	return ref(x.svc.RevokeToken(ctx, x.who, id))
}
