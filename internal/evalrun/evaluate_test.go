package evalrun_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/keel-run/keel/eval"
	"github.com/keel-run/keel/internal/evalrun"
)

// What keel eval run is asked for is checked before anything runs: each
// mistake is the caller's (ErrRefused) and names the flag.
func TestPrepareEvalRefuses(t *testing.T) {
	t.Parallel()
	ok := eval.Config{Model: eval.Recorded, Approve: "deny", Trials: 1, Concurrency: 1}
	for _, tt := range []struct {
		name string
		edit func(p *evalrun.EvalParams)
		want string
	}{
		{"approve", func(p *evalrun.EvalParams) { p.Config.Approve = "maybe" }, "--approve"},
		{"trials", func(p *evalrun.EvalParams) { p.Config.Trials = 0 }, "--trials"},
		{"concurrency", func(p *evalrun.EvalParams) { p.Config.Concurrency = -1 }, "--concurrency"},
		{"budget", func(p *evalrun.EvalParams) { p.Config.Budget = -1 }, "--budget"},
		{"source", func(p *evalrun.EvalParams) { p.Sources = []string{"owner/name"} }, "--source"},
	} {
		p := &evalrun.EvalParams{Home: t.TempDir(), Suite: t.TempDir(), Config: ok}
		tt.edit(p)
		_, err := evalrun.PrepareEval(p)
		if !errors.Is(err, evalrun.ErrRefused) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want a refusal naming %s", tt.name, err, tt.want)
		}
	}
}
