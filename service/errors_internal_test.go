package service

import (
	"fmt"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/policy"
)

// Refusals of Keel's libraries reach people without the libraries'
// names nor the wrapping that names internals (report 15, R16).
func TestPlain(t *testing.T) {
	for _, c := range []struct {
		err, sentinel error
		want          string
	}{
		{fmt.Errorf("agent: answer input i1 of run r1: %w", fmt.Errorf("%w: action %q, want accept, decline or cancel", agent.ErrBadAnswer, "")), agent.ErrBadAnswer,
			`the answer does not fit the request: action "", want accept, decline or cancel`},
		{fmt.Errorf("agent: resolve approval of run r1 call c1: %w", fmt.Errorf("%w: %q is not a prefix", policy.ErrBadPrefix, "python")), policy.ErrBadPrefix,
			`the prefix does not match the command: "python" is not a prefix`},
		{fmt.Errorf("telemetry: cost by %q: want one of [run agent]", "bogus"), nil, `cost by "bogus": want one of [run agent]`},
		{fmt.Errorf("policy file %s: bad", "p.cedar"), nil, "policy file p.cedar: bad"},
	} {
		if got := plain(c.err, c.sentinel); got != c.want {
			t.Errorf("plain(%q) = %q, want %q", c.err, got, c.want)
		}
	}
}
