package tui

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
)

// Decision prints keel policy check: the call's decision, the policy
// that made it (on this machine or the server's), and each part's
// decision; as JSON with asJSON. It returns keel policy check's exit
// status: 0 allow, 1 deny, 4 ask.
func Decision(out io.Writer, d *api.PolicyDecision, asJSON bool) (int, error) {
	code := 1
	switch d.Effect {
	case policy.Allow:
		code = 0
	case policy.Ask:
		code = 4
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return code, enc.Encode(d)
	}
	w := Esc(out)
	fmt.Fprintf(w, "%s  (%s)\n", strings.ToUpper(string(d.Effect)), d.Reason)
	fmt.Fprintf(w, "policy %s · sha256 %s · %d rules\n", d.Policy, d.SHA256[:min(12, len(d.SHA256))], d.Rules)
	if len(d.Parts) == 0 {
		return code, nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PART\tDECISION\tPOLICIES\tTEXT\tREASON")
	for _, p := range d.Parts {
		text := agent.Clip(agent.OneLine(p.Text), 60)
		if len(p.Via) > 0 {
			text += "  [via " + strings.Join(p.Via, " > ") + "]"
		}
		reason := p.Reason
		if p.Detail != "" {
			reason += " (" + p.Detail + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", p.Index+1, p.Effect, strings.Join(p.Policies, ","), Cell(text), Cell(reason))
	}
	tw.Flush()
	if d.PartsOmitted > 0 {
		fmt.Fprintf(w, "... and %d more parts, not decided\n", d.PartsOmitted)
	}
	return code, nil
}

// PolicyTests counts what keel policy test found in its files.
type PolicyTests struct {
	// Failed and Total count the test cases; Problems the findings of
	// Keel's checks of ordinary calls (policy.Engine.Lint).
	Failed, Total, Problems int
}

// File prints the lint problems and test results of one policy file
// (passing cases only when verbose) and counts them.
func (t *PolicyTests) File(w io.Writer, file string, problems []string, res []policy.CaseResult, verbose bool) {
	for _, p := range problems {
		t.Problems++
		fmt.Fprintf(w, "FAIL %s: %s\n", file, p)
	}
	if len(res) == 0 {
		fmt.Fprintf(w, "%s: no test cases of its own (a TOML policy carries them as [[test]] entries)\n", file)
	}
	for _, r := range res {
		t.Total++
		switch {
		case r.Problem != "":
			t.Failed++
			fmt.Fprintf(w, "FAIL %s: %s: %s\n", file, r.Case.Name, r.Problem)
			for _, p := range r.Got.Parts {
				fmt.Fprintf(w, "       part %d %s %q: %s\n", p.Index+1, p.Effect, agent.Clip(agent.OneLine(p.Text), 60), p.Reason)
			}
		case verbose:
			fmt.Fprintf(w, "ok   %s: %s (%s)\n", file, r.Case.Name, r.Got.Effect)
		}
	}
}

// Summary prints the counts and reports whether everything passed.
func (t *PolicyTests) Summary(w io.Writer) bool {
	if t.Total > 0 {
		fmt.Fprintf(w, "%d of %d test cases passed\n", t.Total-t.Failed, t.Total)
	} else {
		fmt.Fprintln(w, "no test cases ran")
	}
	if t.Problems > 0 {
		fmt.Fprintf(w, "%d problem(s) found by Keel's checks of ordinary calls\n", t.Problems)
	}
	return t.Failed == 0 && t.Problems == 0
}
