package evalrun

import (
	"fmt"
	"io"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/model/replay"
)

// Comparison is a replayed run's tool results beside a recording's, call
// by call id (keel runs compare). The whole output is compared: the
// artifact when the model saw only part of it.
type Comparison struct {
	// Total counts the run's calls with a recorded result; Unrecorded
	// those without (such as the submitting call).
	Total, Unrecorded int
	// SameCode, SameOutput and Both count the calls that gave the
	// recorded exit code, output, or both.
	SameCode, SameOutput, Both int
	// Differing are the calls that did not give both.
	Differing []CallDifference
	// Submission is the recording's submission, Output the run's final
	// output ("" while it has not ended).
	Submission, Output string
	Ended              bool
}

// CallDifference is one call whose exit code or output differ from the
// recording's.
type CallDifference struct {
	Call                   *agent.Call
	RecordedCode           int
	Code                   *int
	RecordedOutput, Output string
}

// Compare compares the tool results of st (a run replaying tr) with tr's.
func Compare(st *agent.State, tr *replay.Trajectory) *Comparison {
	c := &Comparison{Submission: tr.Submission(), Ended: st.Ended != nil}
	if st.Ended != nil {
		c.Output = st.Ended.Output
	}
	for _, t := range st.Turns {
		for _, call := range t.Calls {
			rec, ok := tr.ToolResult(call.ID)
			if !ok {
				c.Unrecorded++
				continue
			}
			c.Total++
			f := call.Finished
			if f == nil {
				continue
			}
			out := agent.ResultOutput(&f.Result)
			if f.OutputBytes == 0 {
				out = "" // the model saw a "(no output)" note
			}
			if f.Artifact != "" {
				if b, err := assemble.ReadArtifact(st.Created, f.Artifact); err == nil {
					out = string(b)
				}
			}
			codeOK := f.ExitCode != nil && *f.ExitCode == rec.ExitCode
			outOK := out == rec.RawOutput
			if codeOK {
				c.SameCode++
			}
			if outOK {
				c.SameOutput++
			}
			if codeOK && outOK {
				c.Both++
			} else {
				c.Differing = append(c.Differing, CallDifference{Call: call, RecordedCode: rec.ExitCode, Code: f.ExitCode, RecordedOutput: rec.RawOutput, Output: out})
			}
		}
	}
	return c
}

// Report prints the comparison's counts and, with verbose, every call
// that differs.
func (c *Comparison) Report(w io.Writer, verbose bool) {
	for _, d := range c.Differing {
		if !verbose {
			break
		}
		code := "none"
		if d.Code != nil {
			code = fmt.Sprint(*d.Code)
		}
		fmt.Fprintf(w, "%s %s\n  exit: recorded %d, got %s\n", d.Call.ID, agent.CallSummary(d.Call.Name, d.Call.Arguments), d.RecordedCode, code)
		if d.Output != d.RecordedOutput {
			fmt.Fprintf(w, "  output: recorded %d bytes %q\n          got      %d bytes %q\n", len(d.RecordedOutput), agent.Clip(d.RecordedOutput, 160), len(d.Output), agent.Clip(d.Output, 160))
		}
	}
	fmt.Fprintf(w, "%d recorded tool calls compared: %d same exit code, %d same output, %d same both", c.Total, c.SameCode, c.SameOutput, c.Both)
	if c.Unrecorded > 0 {
		fmt.Fprintf(w, " (%d calls without a recorded result, such as the submitting call)", c.Unrecorded)
	}
	fmt.Fprintln(w)
	if c.Total > 0 && c.Submission != "" && c.Ended {
		fmt.Fprintf(w, "final output equals the recorded submission: %v\n", strings.TrimSpace(c.Output) == strings.TrimSpace(c.Submission))
	}
}
