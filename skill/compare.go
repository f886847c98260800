package skill

import (
	"context"
	"fmt"
	"regexp"
	"strconv"

	"github.com/keel-run/keel/internal/lazy"
)

// The comparison harness: runs of a task's work with and without a
// skill, on recorded cases, in the sandbox. It is small on purpose and
// shaped like an evaluation (cases × arms → graded results), so that a
// later evaluation package can take its place.

// Case is one recorded case: the commands a recorded agent ran for the
// work the skill covers (the baseline arm) and the commands an agent
// following the skill runs (the other arm), on fresh copies of the same
// workspace.
type Case struct {
	Name string `json:"name"`
	// Baseline and With are the arms' commands, run in order.
	Baseline []string `json:"baseline"`
	With     []string `json:"with"`
}

// Runner runs one command of an arm in a fresh sandbox on the arm's own
// copy of the case's workspace (the same copy for every command of an
// arm) and returns its exit code and output.
type Runner interface {
	Run(ctx context.Context, arm, command string) (exit int, output []byte, err error)
}

// Arm is one arm's measured outcome on a case.
type Arm struct {
	Commands int `json:"commands"`
	// Failed counts commands that exited non-zero or printed an error a
	// test run reports (ModuleNotFoundError, "ERROR", "error:").
	Failed int `json:"failed"`
	// Passed is the most tests one command reported passed (pytest's
	// summary line), Achieved whether any test run passed with none
	// failing or erroring.
	Passed   int  `json:"tests_passed"`
	Achieved bool `json:"achieved"`
	// OutputBytes is what the model would have read.
	OutputBytes int `json:"output_bytes"`
}

// CaseResult is one case's two arms.
type CaseResult struct {
	Case     string `json:"case"`
	Baseline Arm    `json:"baseline"`
	With     Arm    `json:"with"`
}

// Comparison is the evidence a candidate is promoted on.
type Comparison struct {
	Cases []CaseResult `json:"cases"`
	// Beats is set when, on every case, the skill's arm achieved at least
	// what the baseline did, and on some case it achieved what the
	// baseline did not, or did it in fewer commands with less output.
	Beats bool   `json:"beats"`
	Why   string `json:"why"`
}

var (
	pytestSummary = lazy.Regexp(`(?m)^=*\s*(?:(\d+) failed, )?(\d+) passed(?:, (\d+) (?:skipped|deselected|warnings?))*.*(?:in [\d.]+s)`)
	errorMarks    = lazy.Regexp(`ModuleNotFoundError|ImportError|(?m)^ERROR|(?m)^error:|command not found|No module named|(\d+) error`)
)

// Compare runs every case's arms through r and judges them.
func Compare(ctx context.Context, r Runner, cases []Case) (*Comparison, error) {
	cmp := &Comparison{Beats: true}
	better := false
	for i, c := range cases {
		res := CaseResult{Case: c.Name}
		for _, arm := range []struct {
			name string
			cmds []string
			out  *Arm
		}{{fmt.Sprintf("baseline-%d", i), c.Baseline, &res.Baseline}, {fmt.Sprintf("with-%d", i), c.With, &res.With}} {
			for _, cmd := range arm.cmds {
				exit, out, err := r.Run(ctx, arm.name, cmd)
				if err != nil {
					return nil, fmt.Errorf("skill: compare %s: %s: %w", c.Name, cmd, err)
				}
				a := arm.out
				a.Commands++
				a.OutputBytes += len(out)
				failed := exit != 0 || errorMarks().Match(out)
				if failed {
					a.Failed++
				}
				if m := pytestSummary().FindSubmatch(out); m != nil {
					n, _ := strconv.Atoi(string(m[2]))
					a.Passed = max(a.Passed, n)
					if len(m[1]) == 0 && !failed && n > 0 {
						a.Achieved = true
					}
				}
			}
		}
		cmp.Cases = append(cmp.Cases, res)
		b, w := res.Baseline, res.With
		switch {
		case b.Achieved && !w.Achieved:
			cmp.Beats = false
			cmp.Why += fmt.Sprintf("%s: the baseline achieved what the skill did not; ", c.Name)
		case w.Achieved && !b.Achieved:
			better = true
			cmp.Why += fmt.Sprintf("%s: the skill achieved a passing test run (%d passed) in %d commands; the baseline's %d commands did not (%d failed); ", c.Name, w.Passed, w.Commands, b.Commands, b.Failed)
		case w.Achieved && w.Commands < b.Commands && w.OutputBytes <= b.OutputBytes:
			better = true
			cmp.Why += fmt.Sprintf("%s: both achieved it, the skill in %d commands instead of %d; ", c.Name, w.Commands, b.Commands)
		default:
			cmp.Why += fmt.Sprintf("%s: no better than the baseline; ", c.Name)
		}
	}
	cmp.Beats = cmp.Beats && better && len(cases) > 0
	return cmp, nil
}

// Baseline returns the commands of a recorded trajectory that match
// covers (a regular expression), in order: what the recorded agent did
// for the work the skill covers.
func Baseline(commands []string, covers string) ([]string, error) {
	re, err := regexp.Compile(covers)
	if err != nil {
		return nil, fmt.Errorf("skill: covers %q: %w", covers, err)
	}
	var out []string
	for _, c := range commands {
		if re.MatchString(c) {
			out = append(out, c)
		}
	}
	return out, nil
}
