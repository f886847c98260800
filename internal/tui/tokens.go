package tui

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// tokenRow is one model call or compaction of a token report.
type tokenRow struct {
	Step int `json:"step,omitempty"`
	// Estimate is Keel's estimate of the request; Recorded the provider's
	// input tokens; Cached their cached part.
	Estimate int   `json:"estimate"`
	Recorded int64 `json:"recorded"`
	Cached   int64 `json:"cached,omitempty"`
	// Growth is Estimate minus the previous step's.
	Growth int `json:"growth"`
	// Messages is the number of messages in the request.
	Messages int `json:"messages"`
	// Compaction describes a context.compacted event instead of a step.
	Compaction string `json:"compaction,omitempty"`
}

// TokenReport is the result of `keel runs tokens`.
type TokenReport struct {
	RunID  string `json:"run_id"`
	Model  string `json:"model"`
	Family string `json:"family"`
	Window int    `json:"window"`
	Prefix int    `json:"prefix_tokens"`
	System int    `json:"system_tokens"`
	Tools  int    `json:"tool_schema_tokens"`
	// PerTool is each tool schema's share of Tools, sorted by name.
	PerTool []toolTokens `json:"per_tool"`
	Rows    []tokenRow   `json:"rows"`
	// Replay is set when the recorded counts come from a recording.
	Replay bool `json:"replay,omitempty"`
	// MeanError and WorstError compare Estimate with Recorded over the
	// steps that have both, as fractions.
	MeanError  float64 `json:"mean_error"`
	WorstError float64 `json:"worst_error"`
	// GrowthKeel and GrowthRecorded are the mean growth per step, in
	// tokens, of Keel's estimate and of the recorded count, over pairs of
	// consecutive steps with no compaction between them (0 without any).
	GrowthKeel     float64 `json:"growth_per_step_keel"`
	GrowthRecorded float64 `json:"growth_per_step_recorded"`
}

// toolTokens is one tool schema's estimated size.
type toolTokens struct {
	Name   string `json:"name"`
	Tokens int    `json:"tokens"`
}

// Tokens folds events one by one and, before each model response,
// rebuilds the request the run sent.
func Tokens(runID string, events []journal.Event) (*TokenReport, error) {
	if err := journal.Verify(runID, events); err != nil {
		return nil, err
	}
	st := &agent.State{RunID: runID}
	rep := &TokenReport{RunID: runID}
	prev, steps := 0, 0
	var sum float64
	for i := range events {
		e := &events[i]
		if e.Type == journal.ModelResponded && st.Created != nil {
			v, err := agent.Decode(e)
			if err != nil {
				return nil, err
			}
			mr := v.(*agent.ModelResponded)
			req := agent.BuildRequest(st, 0)
			est := agent.EstimateRequest(req, st.Family())
			steps++
			rep.Rows = append(rep.Rows, tokenRow{Step: steps, Estimate: est, Recorded: mr.Usage.InputTokens, Cached: mr.Usage.CachedInputTokens, Growth: est - prev, Messages: len(req.Messages)})
			prev = est
			if mr.Usage.InputTokens > 0 {
				d := float64(int64(est)-mr.Usage.InputTokens) / float64(mr.Usage.InputTokens)
				if d < 0 {
					d = -d
				}
				sum += d
				rep.WorstError = max(rep.WorstError, d)
			}
		}
		if err := st.Apply(e); err != nil {
			return nil, err
		}
		if e.Type == journal.RunCreated {
			fam := st.Family()
			rep.Model, rep.Family, rep.Window = st.Created.Model, fam.Name, st.ContextWindow()
			rep.Prefix = agent.PrefixTokens(st, fam)
			rep.System = agent.EstimateRequest(&model.Request{System: agent.BuildRequest(st, 0).System}, fam)
			rep.Tools = rep.Prefix - rep.System
			for _, t := range st.Created.Tools {
				rep.PerTool = append(rep.PerTool, toolTokens{t.Name, agent.EstimateRequest(&model.Request{Tools: []model.ToolSpec{t.ToolSpec}}, fam)})
			}
			rep.Replay = strings.HasPrefix(st.Created.Model, "replay:")
		}
		if e.Type == journal.ContextCompacted {
			cs := st.Compactions()
			c := cs[len(cs)-1]
			kind := "compacted"
			if c.Handoff {
				kind = "handoff"
			}
			how := "model summary"
			if c.Mechanical {
				how = "mechanical summary"
			}
			rep.Rows = append(rep.Rows, tokenRow{Estimate: c.TokensAfter, Growth: c.TokensAfter - c.TokensBefore,
				Compaction: fmt.Sprintf("%s steps %d–%d (%s): %s → %s tokens", kind, c.FirstStep, c.LastStep, how, num(int64(c.TokensBefore)), num(int64(c.TokensAfter)))})
			prev = c.TokensAfter
		}
	}
	n := 0
	for _, r := range rep.Rows {
		if r.Compaction == "" && r.Recorded > 0 {
			n++
		}
	}
	if n > 0 {
		rep.MeanError = sum / float64(n)
	}
	var pairs int
	var gk, gr int64
	for i := 1; i < len(rep.Rows); i++ {
		a, b := rep.Rows[i-1], rep.Rows[i]
		if a.Compaction != "" || b.Compaction != "" || a.Recorded == 0 || b.Recorded == 0 {
			continue
		}
		pairs++
		gk += int64(b.Estimate - a.Estimate)
		gr += b.Recorded - a.Recorded
	}
	if pairs > 0 {
		rep.GrowthKeel, rep.GrowthRecorded = float64(gk)/float64(pairs), float64(gr)/float64(pairs)
	}
	return rep, nil
}

func (r *TokenReport) Print(w io.Writer) error {
	fmt.Fprintf(w, "run %s · model %s · family %s · window %s tokens\n", r.RunID, r.Model, r.Family, num(int64(r.Window)))
	fmt.Fprintf(w, "fixed prefix: %s tokens (system prompt and memory %s, tool schemas %s), the same in every request\n", num(int64(r.Prefix)), num(int64(r.System)), num(int64(r.Tools)))
	if len(r.PerTool) > 0 {
		var parts []string
		for _, t := range r.PerTool {
			parts = append(parts, fmt.Sprintf("%s %s", t.Name, num(int64(t.Tokens))))
		}
		fmt.Fprintf(w, "tool schemas: %s\n", strings.Join(parts, ", "))
	}
	if r.Replay {
		fmt.Fprintln(w, "RECORDED is the recorded run's own prompt (its system prompt and tools), not Keel's request: compare the growth.")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "STEP\tKEEL EST\tRECORDED\tCACHED\tDIFF\tGROWTH\tMSGS\t")
	for _, row := range r.Rows {
		if row.Compaction != "" {
			fmt.Fprintf(tw, "—\t%s\t\t\t\t%+d\t\t  %s\n", num(int64(row.Estimate)), row.Growth, row.Compaction)
			continue
		}
		diff := ""
		if row.Recorded > 0 {
			diff = fmt.Sprintf("%+.1f%%", 100*float64(int64(row.Estimate)-row.Recorded)/float64(row.Recorded))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%+d\t%d\t\n", row.Step, num(int64(row.Estimate)), num(row.Recorded), num(row.Cached), diff, row.Growth, row.Messages)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	what := "estimate vs recorded"
	if r.Replay {
		what = "estimate vs recorded (different prompts: the gap includes the difference of fixed prefixes)"
	}
	fmt.Fprintf(w, "\n%s: mean %.1f%%, worst %.1f%%\n", what, 100*r.MeanError, 100*r.WorstError)
	if r.GrowthKeel != 0 || r.GrowthRecorded != 0 {
		fmt.Fprintf(w, "growth per step (steps with no compaction between them): Keel %+.0f tokens, recorded %+.0f tokens\n", r.GrowthKeel, r.GrowthRecorded)
	}
	return nil
}
