package eval

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// Divergence is the first place where a re-execution of a run differs
// from the original.
type Divergence struct {
	// What differs: "request" (what the model was sent: system prompt,
	// tools, task, earlier turns and results), "gate" (a decision),
	// "tool" (a result: exit status or output), "end" (how the run
	// ended), or "missing" (one of the two runs has no such event).
	What string `json:"what"`
	// Seq and ReplaySeq are the events of the original and of the
	// re-execution (0 when that run has none); Type is the original's.
	Seq       int64        `json:"seq"`
	ReplaySeq int64        `json:"replay_seq"`
	Type      journal.Type `json:"type"`
	CallID    string       `json:"call_id,omitempty"`
	Want      string       `json:"want"`
	Got       string       `json:"got"`
}

// ReplayStats count what [Diverge] compared.
type ReplayStats struct {
	Requests  int `json:"requests"`
	Gate      int `json:"gate_decisions"`
	Tools     int `json:"tool_results"`
	SameTools int `json:"same_tool_results"`
	Compared  int `json:"compared"`
	// Diverged counts the compared events that differ; the first is
	// Divergence. Comparing goes on past a difference while the two runs
	// still line up (the same kind of event, for the same call).
	Diverged   int         `json:"diverged"`
	Divergence *Divergence `json:"-"`
}

// DefaultVolatile returns the patterns of tool output that differ between
// identical executions and are masked before outputs are compared:
// durations ("in 0.31s", "0.2 seconds"), clock times and dates (also
// ls -l's "Dec  6 10:33"), and memory addresses of object
// representations.
var DefaultVolatile = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		regexp.MustCompile(`\b\d+(\.\d+)?\s*(s|ms|sec|secs|seconds)\b`),
		regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?`),
		regexp.MustCompile(`\b\d{2}:\d{2}:\d{2}\b`),
		regexp.MustCompile(`\b0x[0-9a-fA-F]{6,}\b`),
		regexp.MustCompile(`\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} +(\d{1,2}:\d{2}|\d{4})\b`),
	}
})

// item is one comparable event of a run.
type item struct {
	what, call, value, show string
	seq                     int64
	typ                     journal.Type
}

// items reads the comparable events of a run: before each model answer,
// the hash of the request it answered (what the model was sent, folded
// from the events); each gate decision; each tool result (exit status and
// output, run ids and volatile parts masked); the run's end.
func items(events []journal.Event, volatile []*regexp.Regexp) ([]item, error) {
	var out []item
	h := sha256.New()
	runID := ""
	write := func(parts ...string) {
		for _, p := range parts {
			fmt.Fprintf(h, "%d:%s", len(p), p)
		}
	}
	for i := range events {
		e := &events[i]
		if runID == "" {
			runID = e.RunID
		}
		v, err := agent.Decode(e)
		if err != nil {
			return nil, err
		}
		switch p := v.(type) {
		case *agent.RunCreated:
			var tools []string
			for _, t := range p.Tools {
				tools = append(tools, t.Name+"/"+t.Effect)
			}
			write("system", p.System, "task", p.Task, "tools", strings.Join(tools, ","), "marker", p.CompletionMarker)
		case *agent.UserMessage:
			write("user", p.Content)
		case *agent.ContextCompacted:
			b, _ := json.Marshal(p)
			write("compacted", string(b))
		case *agent.ModelResponded:
			sum := hex.EncodeToString(h.Sum(nil))[:16]
			out = append(out, item{what: "request", value: sum, show: "request " + sum, seq: e.Seq, typ: e.Type})
			b, _ := json.Marshal(p.Message.ToolCalls)
			write("assistant", p.Message.Content, string(b))
		case *agent.GateDecided:
			val := fmt.Sprintf("%s %s", p.Effect, strings.Join(p.Policies, ","))
			out = append(out, item{what: "gate", call: p.CallID, value: val, show: val + ": " + oneLine(p.Reason, 120), seq: e.Seq, typ: e.Type})
		case *agent.ToolFinished:
			content := p.Content
			if runID != "" {
				content = strings.ReplaceAll(content, runID, "RUN")
			}
			masked := content
			for _, re := range volatile {
				masked = re.ReplaceAllString(masked, "…")
			}
			code := "none"
			if p.ExitCode != nil {
				code = fmt.Sprint(*p.ExitCode)
			}
			write("result", p.CallID, masked) // volatile parts masked, as below
			out = append(out, item{what: "tool", call: p.CallID, value: code + "\x00" + masked,
				show: fmt.Sprintf("exit %s, %d bytes: %s", code, len(p.Content), oneLine(masked, 160)), seq: e.Seq, typ: e.Type})
		case *agent.RunEnded:
			if e.Type == journal.RunPaused {
				continue
			}
			val := string(e.Type) + " " + p.Reason
			out = append(out, item{what: "end", value: val, show: val, seq: e.Seq, typ: e.Type})
		}
	}
	return out, nil
}

// Diverge compares a re-execution's events (replay) with the original's
// (orig), both from event 1, and returns what it compared and the first
// divergence (nil when they agree). volatile masks parts of tool output
// that differ between identical executions (nil: those of [DefaultVolatile]).
func Diverge(orig, replay []journal.Event, volatile []*regexp.Regexp) (*ReplayStats, error) {
	if volatile == nil {
		volatile = DefaultVolatile()
	}
	a, err := items(orig, volatile)
	if err != nil {
		return nil, err
	}
	b, err := items(replay, volatile)
	if err != nil {
		return nil, err
	}
	st := &ReplayStats{}
	for i := 0; i < len(a) || i < len(b); i++ {
		if i >= len(a) || i >= len(b) {
			d := &Divergence{What: "missing"}
			if i < len(a) {
				d.Seq, d.Type, d.CallID, d.Want, d.Got = a[i].seq, a[i].typ, a[i].call, a[i].show, "(the re-execution ended before this event)"
			} else {
				d.ReplaySeq, d.Type, d.CallID, d.Want, d.Got = b[i].seq, b[i].typ, b[i].call, "(the original ended before this event)", b[i].show
			}
			st.Divergence = d
			return st, nil
		}
		x, y := a[i], b[i]
		st.Compared++
		switch x.what {
		case "request":
			st.Requests++
		case "gate":
			st.Gate++
		case "tool":
			st.Tools++
		}
		if x.what != y.what || x.call != y.call {
			// The two runs no longer line up: nothing after compares.
			if st.Divergence == nil {
				st.Divergence = &Divergence{What: "missing", Seq: x.seq, ReplaySeq: y.seq, Type: x.typ, CallID: x.call, Want: x.show, Got: y.show}
			}
			return st, nil
		}
		if x.value != y.value {
			if x.what == "request" && st.Diverged > 0 {
				// A request carries every earlier result: after a
				// difference, later requests differ by it.
				continue
			}
			st.Diverged++
			if st.Divergence == nil {
				want, got := x.show, y.show
				if x.what == "tool" {
					want, got = diffAt(x.value, y.value)
				}
				st.Divergence = &Divergence{What: x.what, Seq: x.seq, ReplaySeq: y.seq, Type: x.typ, CallID: x.call, Want: want, Got: got}
			}
			continue
		}
		if x.what == "tool" {
			st.SameTools++
		}
	}
	return st, nil
}

// diffAt shows two tool results around their first differing byte.
func diffAt(a, b string) (string, string) {
	ca, ra, _ := strings.Cut(a, "\x00")
	cb, rb, _ := strings.Cut(b, "\x00")
	if ca != cb {
		return "exit " + ca, "exit " + cb
	}
	i := 0
	for i < len(ra) && i < len(rb) && ra[i] == rb[i] {
		i++
	}
	from := max(0, i-40)
	show := func(s string) string {
		end := min(len(s), i+80)
		return fmt.Sprintf("at byte %d: %q", i, s[from:end])
	}
	return show(ra), show(rb)
}

// WriteText writes the comparison for a person.
func (st *ReplayStats) WriteText(w io.Writer, orig, replay string) {
	fmt.Fprintf(w, "compared %d events of run %s with its re-execution %s: %d requests, %d gate decisions, %d tool results (%d the same); %d differ\n",
		st.Compared, orig, replay, st.Requests, st.Gate, st.Tools, st.SameTools, st.Diverged)
	d := st.Divergence
	if d == nil {
		fmt.Fprintln(w, "no divergence: every request, gate decision, tool result and the end are the same")
		return
	}
	where := fmt.Sprintf("event %d (%s)", d.Seq, d.Type)
	if d.Seq == 0 {
		where = fmt.Sprintf("re-execution event %d (%s)", d.ReplaySeq, d.Type)
	} else if d.ReplaySeq != 0 {
		where += fmt.Sprintf(", re-execution event %d", d.ReplaySeq)
	}
	call := ""
	if d.CallID != "" {
		call = " of call " + d.CallID
	}
	fmt.Fprintf(w, "first divergence at %s: %s%s differs\n  original:     %s\n  re-execution: %s\n", where, d.What, call, d.Want, d.Got)
}
