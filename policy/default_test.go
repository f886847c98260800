package policy_test

import (
	"testing"

	"github.com/keel-run/keel/policy"
)

// The default policy's own test cases pass.
func TestDefaultPolicyCases(t *testing.T) {
	e := policy.Default()
	if len(e.Cases()) < 20 {
		t.Fatalf("default policy has %d test cases", len(e.Cases()))
	}
	for _, r := range e.Test(t.Context()) {
		if r.Problem != "" {
			t.Errorf("%s: %s\nparts: %+v", r.Case.Name, r.Problem, r.Got.Parts)
		}
	}
}
