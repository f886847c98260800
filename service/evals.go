package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/keel-run/keel/eval"
	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/server/api"
)

// Evaluations (docs/eval.md): the results keel eval run keeps, with the
// numbers of their reports. An evaluation spans many runs of many agents
// and says what they cost: admins (and the command line on the
// journal's machine) see them.

// EvalHost is where a service finds evaluations: the results keel eval
// run keeps in Keel's home directory on the service's machine. The
// command line implements it; the service reads no files of its own.
type EvalHost interface {
	// EvalIDs returns the ids of the evaluations kept, in any order.
	EvalIDs() ([]string, error)
	// EvalResult reads evaluation id's result (an error wrapping
	// fs.ErrNotExist when there is none).
	EvalResult(id string) (*eval.Result, error)
}

// evalID is what an evaluation id may be: a directory name, never a path.
var evalID = lazy.Regexp(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// ValidEvalID reports whether id can name an evaluation (a directory of
// $KEEL_HOME/evals): letters, digits, '.', '_' and '-', at most 128, not
// starting with '.' or '-'. The CLI refuses the ids the server would.
func ValidEvalID(id string) bool { return evalID().MatchString(id) }

func (s *Service) evalHost(who *Caller) (EvalHost, error) {
	if !who.admin() {
		return nil, forbidden("evaluations are an admin's: they span the runs of every agent and say what they cost")
	}
	if s.opts.Evals == nil {
		return nil, unavailable("this server keeps no evaluations")
	}
	return s.opts.Evals, nil
}

// Evals lists the evaluations kept, newest first, with their overall
// numbers.
func (s *Service) Evals(ctx context.Context, who *Caller) (api.EvalList, error) {
	h, err := s.evalHost(who)
	if err != nil {
		return api.EvalList{}, err
	}
	ids, err := h.EvalIDs()
	if err != nil {
		return api.EvalList{}, err
	}
	out := api.EvalList{Evals: []api.Eval{}}
	for _, id := range ids {
		if ctx.Err() != nil {
			return api.EvalList{}, ctx.Err()
		}
		res, err := h.EvalResult(id)
		if errors.Is(err, fs.ErrNotExist) {
			continue // being written, or a directory of something else
		}
		if err != nil {
			out.Unreadable = append(out.Unreadable, fmt.Sprintf("%s: %v", id, err))
			continue
		}
		out.Evals = append(out.Evals, evalView(eval.NewReport(res, 0)))
	}
	slices.SortStableFunc(out.Evals, func(a, b api.Eval) int {
		if c := b.Started.Compare(a.Started); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// CheckEvalK checks the k of pass@k and pass^k (0: each case's
// trials), as every front end takes it (GET /v1/evals/{id}?k=, keel
// eval report --pass-k).
func CheckEvalK(k int) error {
	if k < 0 {
		return badRequest("k %d: want a number >= 0 (0: the trials)", k)
	}
	return nil
}

// evalReport reads evaluation id and computes its report (pass@k and
// pass^k for k, 0 for its trials per case).
func (s *Service) evalReport(who *Caller, id string, k int) (*eval.Report, error) {
	h, err := s.evalHost(who)
	if err != nil {
		return nil, err
	}
	if !evalID().MatchString(id) {
		return nil, badRequest("%q is not an evaluation id", id)
	}
	if err := CheckEvalK(k); err != nil {
		return nil, err
	}
	res, err := h.EvalResult(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound("no evaluation %s", id)
	}
	if err != nil {
		return nil, err
	}
	return eval.NewReport(res, k), nil
}

// Eval returns evaluation id's report: its numbers overall and per case,
// and every trial.
func (s *Service) Eval(ctx context.Context, who *Caller, id string, k int) (api.EvalReport, error) {
	rep, err := s.evalReport(who, id, k)
	if err != nil {
		return api.EvalReport{}, err
	}
	out := api.EvalReport{Eval: evalView(rep), Cases: []api.EvalCase{}, Trials: []api.EvalTrial{}}
	for _, c := range rep.Cases {
		out.Cases = append(out.Cases, api.EvalCase{Case: c.Case, EvalStats: evalStats(&c.Stats)})
	}
	for _, t := range rep.Trials {
		out.Trials = append(out.Trials, evalTrial(t))
	}
	return out, nil
}

// EvalHTML returns evaluation id's static HTML report, with its plots
// (the page keel eval run writes as report.html).
func (s *Service) EvalHTML(ctx context.Context, who *Caller, id string, k int) ([]byte, error) {
	rep, err := s.evalReport(who, id, k)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := eval.WriteHTML(&b, nil, rep); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func evalView(r *eval.Report) api.Eval {
	return api.Eval{ID: r.ID, Suite: r.Suite, Config: r.Config.Name, Model: r.Config.Model, Policy: r.Config.Policy, Approve: r.Config.Approve,
		TrialsPerCase: r.Config.Trials, Cases: len(r.Cases), Started: r.Started, Finished: r.Finished, Spent: r.Spent, Overall: evalStats(&r.Overall)}
}

func evalStats(s *eval.Stats) api.EvalStats {
	sum := func(x eval.Summary) api.EvalSummary {
		return api.EvalSummary{N: x.N, Mean: x.Mean, Median: x.Median, Min: x.Min, Max: x.Max, Stdev: x.Stdev}
	}
	return api.EvalStats{Trials: s.Trials, Scored: s.Scored, Passed: s.Passed, Failed: s.Failed, Limit: s.Limit, Errored: s.Errored,
		Skipped: s.Skipped, Retried: s.Retried, Rate: s.Rate, Lo: s.Lo, Hi: s.Hi, K: s.K, PassAtK: s.PassAtK, PassHatK: s.PassHatK,
		Flaky: s.Flaky, Calls: s.Calls, Valid: s.Valid, SchemaErrors: s.SchemaErrors, UnknownTools: s.UnknownTools,
		PathDenials: s.PathDenials, Denials: s.Denials, Asks: s.Asks, AskDenials: s.AskDenials, CallRetries: s.CallRetries,
		Cost: sum(s.Cost), Tokens: sum(s.Tokens), WallSec: sum(s.WallSec), Steps: sum(s.Steps), Expected: s.Expected, Matched: s.Matched}
}

func evalTrial(t *eval.Trial) api.EvalTrial {
	v := api.EvalTrial{Case: t.Case, Trial: t.Trial, Attempt: t.Attempt, RunID: t.RunID, Verdict: string(t.Verdict), Error: t.Error, Expected: t.Expected}
	if u := t.Usage; u != nil {
		v.Status, v.Reason, v.Steps, v.Calls, v.Tokens, v.Cost, v.WallMS = u.Status, u.Reason, u.Steps, u.Calls, u.InputTokens+u.OutputTokens, u.Cost, u.WallMS
		v.Asks, v.Denials = u.Asks, u.Denials+u.PathDenials
	}
	for _, c := range t.Checks {
		if !c.Passed {
			v.FailedChecks = append(v.FailedChecks, c.Name+": "+c.Detail)
		}
	}
	for _, p := range t.Retried {
		v.Retried = append(v.Retried, api.EvalAttempt{Attempt: p.Attempt, RunID: p.RunID, Error: p.Error})
	}
	return v
}
