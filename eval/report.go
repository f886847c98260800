package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Stats are the numbers of a set of trials (one case, or all).
type Stats struct {
	Trials  int `json:"trials"`
	Scored  int `json:"scored"`
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Limit   int `json:"limit"`
	Errored int `json:"errored"`
	Skipped int `json:"skipped"`
	// Retried counts attempts that failed on the infrastructure and were
	// run again (not counted in any rate).
	Retried int `json:"retried"`
	// Rate is Passed/Scored with its Wilson 95% interval.
	Rate float64 `json:"rate"`
	Lo   float64 `json:"lo"`
	Hi   float64 `json:"hi"`
	// PassAtK and PassHatK (pass^k) for K, averaged over the cases with
	// at least K scored trials; NaN (null in JSON) when none has.
	K        int      `json:"k"`
	PassAtK  *float64 `json:"pass_at_k"`
	PassHatK *float64 `json:"pass_hat_k"`
	// Flaky counts cases whose scored trials disagree.
	Flaky int `json:"flaky"`
	// Tool-call validity summed over scored trials.
	Calls        int     `json:"calls"`
	SchemaErrors int     `json:"schema_errors"`
	UnknownTools int     `json:"unknown_tools"`
	PathDenials  int     `json:"path_denials"`
	Denials      int     `json:"denials"`
	Asks         int     `json:"asks"`
	AskDenials   int     `json:"ask_denials"`
	CallRetries  int     `json:"call_retries"`
	Valid        float64 `json:"valid"`
	// Per-trial distributions over scored trials.
	Tokens  Summary `json:"tokens"`
	Cost    Summary `json:"cost"`
	WallSec Summary `json:"wall_seconds"`
	Steps   Summary `json:"steps"`
	// Expected counts trials whose case has an expected verdict, and
	// Matched those whose verdict matched it (frozen runs).
	Expected int `json:"expected,omitempty"`
	Matched  int `json:"matched,omitempty"`
}

// CaseStats are the stats of one case.
type CaseStats struct {
	Case string `json:"case"`
	Stats
}

// Report is the numbers of an evaluation.
type Report struct {
	ID       string      `json:"id"`
	Suite    string      `json:"suite"`
	Config   Config      `json:"config"`
	Spent    float64     `json:"spent"`
	Overall  Stats       `json:"overall"`
	Cases    []CaseStats `json:"cases"`
	Trials   []*Trial    `json:"trials"`
	Duration float64     `json:"duration_seconds"`
	Started  time.Time   `json:"started"`
	Finished time.Time   `json:"finished"`
}

// NewReport computes the report of res, with pass@k and pass^k for k
// (0: the configured number of trials).
func NewReport(res *Result, k int) *Report {
	if k <= 0 {
		k = res.Config.Trials
	}
	r := &Report{ID: res.ID, Suite: res.Suite, Config: res.Config, Spent: res.Spent, Trials: res.Trials,
		Duration: res.Finished.Sub(res.Started).Seconds(), Started: res.Started, Finished: res.Finished}
	byCase := map[string][]*Trial{}
	for _, t := range res.Trials {
		byCase[t.Case] = append(byCase[t.Case], t)
	}
	for _, c := range res.Cases {
		r.Cases = append(r.Cases, CaseStats{Case: c, Stats: stats(byCase[c], k, 1)})
	}
	r.Overall = stats(res.Trials, k, 0)
	// pass@k and pass^k overall: the mean over cases that have k trials.
	var at, hat float64
	n := 0
	for _, c := range r.Cases {
		if c.PassAtK != nil {
			at += *c.PassAtK
			hat += *c.PassHatK
			n++
		}
	}
	if n > 0 {
		r.Overall.PassAtK, r.Overall.PassHatK = ptr(at/float64(n)), ptr(hat/float64(n))
	}
	flaky := 0
	for _, c := range r.Cases {
		flaky += c.Flaky
	}
	r.Overall.Flaky = flaky
	return r
}

func ptr(f float64) *float64 { return &f }

// stats computes the stats of trials; cases is 1 for one case's trials
// (pass@k and flakiness are computed), 0 for a mix of cases.
func stats(trials []*Trial, k, cases int) Stats {
	s := Stats{Trials: len(trials), K: k}
	var tokens, cost, wall, steps []float64
	for _, t := range trials {
		s.Retried += len(t.Retried)
		switch t.Verdict {
		case Passed:
			s.Passed++
		case Failed:
			s.Failed++
		case Limit:
			s.Limit++
		case Infra:
			s.Errored++
		case Skipped:
			s.Skipped++
		}
		if t.Expected != "" && t.Verdict.Scored() {
			s.Expected++
			if (t.Expected == "pass") == (t.Verdict == Passed) {
				s.Matched++
			}
		}
		if !t.Verdict.Scored() || t.Usage == nil {
			continue
		}
		s.Scored++
		u := t.Usage
		s.Calls += u.Calls
		s.SchemaErrors += u.SchemaErrors
		s.UnknownTools += u.UnknownTools
		s.PathDenials += u.PathDenials
		s.Denials += u.Denials
		s.Asks += u.Asks
		s.AskDenials += u.AskDenials
		s.CallRetries += u.Retries
		tokens = append(tokens, float64(u.InputTokens+u.OutputTokens))
		cost = append(cost, u.Cost)
		wall = append(wall, float64(u.WallMS)/1000)
		steps = append(steps, float64(u.Steps))
	}
	if s.Scored > 0 {
		s.Rate = float64(s.Passed) / float64(s.Scored)
	}
	s.Lo, s.Hi = Wilson(s.Passed, s.Scored)
	s.Valid = 1
	if s.Calls > 0 {
		s.Valid = float64(s.Calls-s.SchemaErrors-s.UnknownTools) / float64(s.Calls)
	}
	s.Tokens, s.Cost, s.WallSec, s.Steps = Summarize(tokens), Summarize(cost), Summarize(wall), Summarize(steps)
	if cases == 1 && s.Scored >= k && k > 0 {
		s.PassAtK = ptr(PassAtK(s.Scored, s.Passed, k))
		s.PassHatK = ptr(PassHatK(s.Scored, s.Passed, k))
	}
	if cases == 1 && s.Passed > 0 && s.Passed < s.Scored {
		s.Flaky = 1
	}
	return s
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r for a person.
func (r *Report) WriteText(w io.Writer) error {
	o := &r.Overall
	fmt.Fprintf(w, "eval %s: suite %s, config %s (model %s", r.ID, r.Suite, r.Config.Name, r.Config.Model)
	if r.Config.Policy != "" {
		fmt.Fprintf(w, ", policy %s", r.Config.Policy)
	}
	fmt.Fprintf(w, "), %d trials per case, %.0fs\n", r.Config.Trials, r.Duration)
	fmt.Fprintf(w, "success %s  (%d/%d scored; 95%% CI %s–%s)\n", pct(o.Rate), o.Passed, o.Scored, pct(o.Lo), pct(o.Hi))
	fmt.Fprintf(w, "pass@%d %s  pass^%d %s  flaky cases %d\n", o.K, optPct(o.PassAtK), o.K, optPct(o.PassHatK), o.Flaky)
	fmt.Fprintf(w, "trials %d: passed %d, failed checks %d, hit a limit %d, infrastructure errors %d (not scored), skipped %d; %d attempts retried after an infrastructure error\n",
		o.Trials, o.Passed, o.Failed, o.Limit, o.Errored, o.Skipped, o.Retried)
	fmt.Fprintf(w, "tool calls %d: valid %s (schema errors %d, unknown tools %d), path refusals %d, policy denials %d, asks %d (%d of them denied), re-runs %d\n",
		o.Calls, pct(o.Valid), o.SchemaErrors, o.UnknownTools, o.PathDenials, o.Denials, o.Asks, o.AskDenials, o.CallRetries)
	fmt.Fprintf(w, "per trial: cost $%.4f mean (total $%.4f), tokens %.0f mean, wall %.1fs mean (%.1f–%.1f), steps %.1f mean\n",
		o.Cost.Mean, r.Spent, o.Tokens.Mean, o.WallSec.Mean, o.WallSec.Min, o.WallSec.Max, o.Steps.Mean)
	if o.Expected > 0 {
		fmt.Fprintf(w, "expected verdicts reproduced: %d of %d\n", o.Matched, o.Expected)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-40s %6s %13s %7s %7s %6s %6s %5s %9s %7s\n", "CASE", "RATE", "95% CI", "PASS@K", "PASS^K", "ERRORS", "DENY", "ASK", "COST", "WALL")
	for _, c := range r.Cases {
		fmt.Fprintf(w, "%-40s %6s %13s %7s %7s %6d %6d %5d %9s %7s\n", clip(c.Case, 40), pct(c.Rate), pct(c.Lo)+"–"+pct(c.Hi),
			optPct(c.PassAtK), optPct(c.PassHatK), c.Errored, c.Denials+c.PathDenials, c.Asks, fmt.Sprintf("$%.4f", c.Cost.Mean), fmt.Sprintf("%.1fs", c.WallSec.Mean))
	}
	fmt.Fprintln(w)
	for _, t := range r.Trials {
		fmt.Fprintf(w, "%s #%d %-7s run %s", t.Case, t.Trial, t.Verdict, orDash(t.RunID))
		if t.Usage != nil {
			fmt.Fprintf(w, " (%s %s, %d steps)", t.Usage.Status, t.Usage.Reason, t.Usage.Steps)
		}
		for _, ch := range t.Checks {
			if !ch.Passed {
				fmt.Fprintf(w, "; check %s: %s", ch.Name, ch.Detail)
			}
		}
		if t.Error != "" {
			fmt.Fprintf(w, "; %s", clip(t.Error, 200))
		}
		for _, p := range t.Retried {
			fmt.Fprintf(w, "; retried after attempt %d (run %s): %s", p.Attempt, orDash(p.RunID), clip(p.Error, 160))
		}
		fmt.Fprintln(w)
	}
	return nil
}

func pct(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}

func optPct(f *float64) string {
	if f == nil {
		return "-"
	}
	return pct(*f)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
