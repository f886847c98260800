package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// Comparison is configuration B measured against A on the same suite.
type Comparison struct {
	A *Report `json:"a"`
	B *Report `json:"b"`
	// Diff is B's success rate minus A's, with Newcombe's 95% interval;
	// Significant is true when the interval excludes 0, that is when the
	// difference exceeds the noise of the trials.
	Diff        float64 `json:"diff"`
	Lo          float64 `json:"lo"`
	Hi          float64 `json:"hi"`
	Significant bool    `json:"significant"`
	// Cases are the per-case differences (cases of both).
	Cases []CaseDiff `json:"cases"`
	// Per-trial means of B minus A.
	Asks, AskDenials, Denials, PathDenials, InvalidCalls float64
	Cost, Tokens, WallSec, Steps                         float64
}

// CaseDiff is one case in both configurations.
type CaseDiff struct {
	Case string  `json:"case"`
	A    float64 `json:"a"`
	B    float64 `json:"b"`
	Diff float64 `json:"diff"`
	// Flaky reports trials of one configuration that disagree on this
	// case: its verdict is noise at this many trials.
	FlakyA bool `json:"flaky_a"`
	FlakyB bool `json:"flaky_b"`
	// AsksA/B and DenialsA/B are summed over the case's trials.
	AsksA    int `json:"asks_a"`
	AsksB    int `json:"asks_b"`
	DenialsA int `json:"denials_a"`
	DenialsB int `json:"denials_b"`
}

// Compare compares b with a.
func Compare(a, b *Report) *Comparison {
	c := &Comparison{A: a, B: b}
	c.Diff, c.Lo, c.Hi = DiffInterval(a.Overall.Passed, a.Overall.Scored, b.Overall.Passed, b.Overall.Scored)
	c.Significant = !math.IsNaN(c.Lo) && (c.Lo > 0 || c.Hi < 0)
	bc := map[string]*CaseStats{}
	for i := range b.Cases {
		bc[b.Cases[i].Case] = &b.Cases[i]
	}
	for _, ca := range a.Cases {
		cb, ok := bc[ca.Case]
		if !ok {
			continue
		}
		c.Cases = append(c.Cases, CaseDiff{Case: ca.Case, A: ca.Rate, B: cb.Rate, Diff: cb.Rate - ca.Rate,
			FlakyA: ca.Flaky > 0, FlakyB: cb.Flaky > 0, AsksA: ca.Asks, AsksB: cb.Asks,
			DenialsA: ca.Denials + ca.PathDenials, DenialsB: cb.Denials + cb.PathDenials})
	}
	per := func(n int, s *Stats) float64 {
		if s.Scored == 0 {
			return 0
		}
		return float64(n) / float64(s.Scored)
	}
	oa, ob := &a.Overall, &b.Overall
	c.Asks = per(ob.Asks, ob) - per(oa.Asks, oa)
	c.AskDenials = per(ob.AskDenials, ob) - per(oa.AskDenials, oa)
	c.Denials = per(ob.Denials, ob) - per(oa.Denials, oa)
	c.PathDenials = per(ob.PathDenials, ob) - per(oa.PathDenials, oa)
	c.InvalidCalls = per(ob.SchemaErrors+ob.UnknownTools, ob) - per(oa.SchemaErrors+oa.UnknownTools, oa)
	c.Cost = ob.Cost.Mean - oa.Cost.Mean
	c.Tokens = ob.Tokens.Mean - oa.Tokens.Mean
	c.WallSec = ob.WallSec.Mean - oa.WallSec.Mean
	c.Steps = ob.Steps.Mean - oa.Steps.Mean
	return c
}

// WriteJSON writes c as indented JSON.
func (c *Comparison) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}

// WriteText writes c for a person.
func (c *Comparison) WriteText(w io.Writer) error {
	a, b := c.A, c.B
	fmt.Fprintf(w, "A: eval %s, config %s: success %s (%d/%d, 95%% CI %s–%s), pass^%d %s\n", a.ID, a.Config.Name, pct(a.Overall.Rate), a.Overall.Passed, a.Overall.Scored, pct(a.Overall.Lo), pct(a.Overall.Hi), a.Overall.K, optPct(a.Overall.PassHatK))
	fmt.Fprintf(w, "B: eval %s, config %s: success %s (%d/%d, 95%% CI %s–%s), pass^%d %s\n", b.ID, b.Config.Name, pct(b.Overall.Rate), b.Overall.Passed, b.Overall.Scored, pct(b.Overall.Lo), pct(b.Overall.Hi), b.Overall.K, optPct(b.Overall.PassHatK))
	verdict := "within the noise of these trials (the interval contains 0): no evidence of a difference"
	if c.Significant {
		verdict = "exceeds the noise of these trials"
	}
	fmt.Fprintf(w, "B − A: %+.0f points (95%% CI %+.0f to %+.0f): %s\n", 100*c.Diff, 100*c.Lo, 100*c.Hi, verdict)
	fmt.Fprintf(w, "flaky cases (trials disagree): A %d, B %d of %d\n", a.Overall.Flaky, b.Overall.Flaky, len(c.Cases))
	fmt.Fprintf(w, "per trial, B − A: asks %+.1f (denied %+.1f), policy denials %+.1f, path refusals %+.1f, invalid calls %+.1f, cost %+.4f $, tokens %+.0f, wall %+.1fs, steps %+.1f\n",
		c.Asks, c.AskDenials, c.Denials, c.PathDenials, c.InvalidCalls, c.Cost, c.Tokens, c.WallSec, c.Steps)
	fmt.Fprintf(w, "totals: asks A %d, B %d (denied A %d, B %d); policy and path denials A %d, B %d; infrastructure errors A %d, B %d\n",
		a.Overall.Asks, b.Overall.Asks, a.Overall.AskDenials, b.Overall.AskDenials, a.Overall.Denials+a.Overall.PathDenials, b.Overall.Denials+b.Overall.PathDenials, a.Overall.Errored, b.Overall.Errored)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-40s %6s %6s %7s %9s %11s\n", "CASE", "A", "B", "B−A", "ASKS A/B", "DENIALS A/B")
	for _, d := range c.Cases {
		flag := ""
		if d.FlakyA || d.FlakyB {
			flag = "  (flaky)"
		}
		fmt.Fprintf(w, "%-40s %6s %6s %+6.0f%% %4d/%-4d %5d/%-5d%s\n", clip(d.Case, 40), pct(d.A), pct(d.B), 100*d.Diff, d.AsksA, d.AsksB, d.DenialsA, d.DenialsB, flag)
	}
	return nil
}
