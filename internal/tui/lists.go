package tui

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

// The lists of the command line's groups (keel runs list, approvals
// list, inputs list, tokens list, audit verify): one printer each, for
// the local journal and a team server alike, so their output cannot
// drift.

// RunRow is one run of keel runs list.
type RunRow struct {
	journal.RunSummary
	// Shown is the status as a person reads it and filters by
	// (service.RunStatus): a running run that nobody executes is queued
	// or interrupted.
	Shown string
	Steps int
	Cost  float64
	Task  string
	// Err says why the run's journal could not be read or folded.
	Err string
}

// runJSON is a line of keel runs list --json: the table's columns, the
// status as the table shows it.
type runJSON struct {
	journal.RunSummary
	Steps int     `json:"steps"`
	Cost  float64 `json:"cost"`
	Task  string  `json:"task"`
	Err   string  `json:"error,omitempty"`
}

// Runs prints keel runs list: JSON lines of the summaries (with the
// table's status, steps, cost and task), or a table.
func Runs(w io.Writer, runs []RunRow, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range runs {
			line := runJSON{RunSummary: r.RunSummary, Steps: r.Steps, Cost: r.Cost, Task: r.Task, Err: r.Err}
			if r.Shown != "" {
				line.Status = journal.Status(r.Shown)
			}
			if err := enc.Encode(line); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(Esc(w), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tCREATED\tEVENTS\tSTEPS\tCOST\tTASK")
	for _, r := range runs {
		steps, cost, task := fmt.Sprint(r.Steps), fmt.Sprintf("$%.4f", r.Cost), agent.Clip(agent.OneLine(r.Task), 50)
		if r.Err != "" {
			steps, cost, task = "", "", "("+agent.Clip(r.Err, 60)+")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.RunID, r.Shown, r.Created.Local().Format("2006-01-02 15:04"), r.LastSeq, steps, cost, Cell(task))
	}
	return tw.Flush()
}

// Approvals prints pending approvals as keel approvals list does: JSON
// lines, or a table (a sentence when there are none) with times relative
// to now's year. An action the table cuts, or a question about what
// flows out, follows the table whole.
func Approvals(out io.Writer, pending []agent.PendingApproval, asJSON bool, now time.Time) error {
	if asJSON {
		return JSONLines(out, pending)
	}
	if len(pending) == 0 {
		fmt.Fprintln(out, "no pending approvals")
		return nil
	}
	tw := tabwriter.NewWriter(Esc(out), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tCALL\tAGENT\tSINCE\tDEADLINE\tTOOL\tACTION")
	var more []agent.PendingApproval
	for _, p := range pending {
		who := p.Principal
		if p.OnBehalfOf != "" {
			who += " for " + p.OnBehalfOf
		}
		deadline := "none"
		if p.Expires != nil {
			deadline = TableTime(*p.Expires, now) + " → " + string(p.Default)
			if p.Expired {
				deadline = "EXPIRED " + deadline
			}
		}
		action := agent.OneLine(visible.String(p.Action))
		shown := agent.Clip(action, 70)
		if shown != action {
			// Never cut silently: the whole action follows the table.
			shown += fmt.Sprintf(" [%d bytes in all, below]", len(p.Action))
			more = append(more, p)
		} else if flowReason(p.Reason) {
			more = append(more, p)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.RunID, visible.String(p.CallID), visible.String(who), TableTime(p.Time, now), deadline, p.Tool, Cell(shown))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range more {
		fmt.Fprintf(out, "\n%s %s (%s) asks: %s\n", p.RunID, visible.String(p.CallID), p.Tool, visible.String(p.Reason))
		for _, line := range strings.Split(visible.String(p.Action), "\n") {
			fmt.Fprintf(out, "    │ %s\n", line)
		}
	}
	return nil
}

// TableTime formats a time for a table: month, day and time when it
// falls in now's year, with the year otherwise.
func TableTime(t, now time.Time) string {
	t, now = t.Local(), now.Local()
	if t.Year() == now.Year() {
		return t.Format("01-02 15:04")
	}
	return t.Format("2006-01-02 15:04")
}

// flowReason reports whether a question is about the run's information
// flow (a secret, untrusted input, private data).
func flowReason(r string) bool {
	return strings.Contains(r, "carries secret") || strings.Contains(r, "untrusted input:") || strings.Contains(r, "private data:")
}

// InputLine describes a pending input request in one line.
func InputLine(p agent.PendingInput) string {
	s := fmt.Sprintf("%s %s  %s asks during %s (%s): %s", p.RunID, p.ID, p.Server, p.CallID, p.Tool, strings.ReplaceAll(p.Message, "\n", " "))
	if p.URL != "" {
		s += "  open: " + p.URL
	}
	return s
}

// Inputs prints keel inputs list: JSON lines, or one line each with the
// form's fields and the command that answers (keel is "keel" or "keel
// --server URL").
func Inputs(out io.Writer, pending []agent.PendingInput, asJSON bool, keel string) error {
	if asJSON {
		return JSONLines(out, pending)
	}
	w := Esc(out)
	if len(pending) == 0 {
		fmt.Fprintln(w, "no run waits for input")
		return nil
	}
	for _, p := range pending {
		fmt.Fprintln(w, InputLine(p))
		if len(p.Schema) > 0 {
			fmt.Fprintf(w, "    form: %s\n", TailText(string(p.Schema), 2000))
		}
		fmt.Fprintf(w, "    answer: %s inputs answer %s %s --set NAME=VALUE ... (or --decline)\n", keel, p.RunID, p.ID)
	}
	return nil
}

// TailText cuts s to its last n bytes (on a line boundary when it can),
// saying how much it left out.
func TailText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := s[len(s)-n:]
	if i := strings.IndexByte(cut, '\n'); i >= 0 && i < len(cut)-1 {
		cut = cut[i+1:]
	}
	return fmt.Sprintf("[%d bytes left out]\n%s", len(s)-len(cut), cut)
}

// NewToken prints a token just created: what it is on stderr, its
// secret alone on stdout.
func NewToken(stdout, stderr io.Writer, tok *api.NewToken) {
	agents := ""
	if len(tok.Agents) > 0 {
		agents = "; acts as " + strings.Join(tok.Agents, ", ")
	}
	fmt.Fprintf(stderr, "keel: created token %s for %s (%s%s); it is shown only this once:\n", tok.ID, visible.String(tok.Name), strings.Join(tok.Scopes, ", "), agents)
	fmt.Fprintln(stdout, tok.Secret)
}

// APITokens prints the token table of keel tokens list (names and the
// creators' names with invisible and control characters escaped).
func APITokens(w io.Writer, toks []api.Token) error {
	tw := tabwriter.NewWriter(Esc(w), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOKEN\tNAME\tSCOPES\tAGENTS\tCREATED\tBY\tSTATUS")
	for _, t := range toks {
		status := "active"
		if t.Revoked != nil {
			status = "revoked " + t.Revoked.Local().Format("2006-01-02 15:04")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, Cell(t.Name), strings.Join(t.Scopes, ","), OrDash(strings.Join(t.Agents, ",")),
			t.Created.Local().Format("2006-01-02 15:04"), Cell(t.CreatedBy), status)
	}
	return tw.Flush()
}

// AuditRow is one stream's audit with its status as keel runs list says
// it (a running run that nobody executes is interrupted).
type AuditRow struct {
	audit.Report
	Shown string
}

// Audit prints the reports of keel audit verify (JSON lines, or a table
// and a count) and returns how many are bad.
func Audit(w io.Writer, rows []AuditRow, asJSON bool) (bad int, err error) {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range rows {
			if err := enc.Encode(r.Report); err != nil {
				return 0, err
			}
		}
	}
	tw := tabwriter.NewWriter(Esc(w), 0, 4, 2, ' ', 0)
	if !asJSON {
		fmt.Fprintln(tw, "STREAM\tKIND\tEVENTS\tSTATUS\tRESULT")
	}
	for _, r := range rows {
		res := "ok"
		if r.Head != "" { // withheld from a token that may not see all its memory
			res += " · head " + Short(r.Head)
		}
		if !r.OK {
			bad++
			res = fmt.Sprintf("BAD at event %d: %s", r.FirstBad, Cell(r.Reason))
		}
		if !asJSON {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.RunID, r.Kind, r.Events, r.Shown, res)
		}
	}
	if !asJSON {
		if err := tw.Flush(); err != nil {
			return bad, err
		}
		fmt.Fprintf(w, "%d of %d streams verified\n", len(rows)-bad, len(rows))
	}
	return bad, nil
}

// Anchors prints the anchor checks of keel audit verify --anchor FILE
// (JSON lines, or the failed ones and a count) and returns how many
// failed.
func Anchors(w io.Writer, checks []audit.AnchorReport, file string, asJSON bool) (failed int, err error) {
	for _, c := range checks {
		if !c.OK {
			failed++
		}
		switch {
		case asJSON:
			if err := json.NewEncoder(w).Encode(c); err != nil {
				return failed, err
			}
		case !c.OK:
			fmt.Fprintf(Esc(w), "ANCHOR %s event %d: %s\n", c.RunID, c.Seq, c.Reason)
		}
	}
	if !asJSON {
		fmt.Fprintf(w, "%d of %d anchors hold (%s)\n", len(checks)-failed, len(checks), file)
	}
	return failed, nil
}

// Short is a hash's first 16 characters.
func Short(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}
