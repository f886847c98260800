package server_test

import (
	"testing"

	"github.com/keel-run/keel/service"
)

func TestDemoPolicy(t *testing.T) {
	e := service.DemoPolicy()
	results := e.Test(t.Context())
	if len(results) < 4 {
		t.Fatalf("the demo policy has %d test cases, want its 4", len(results))
	}
	for _, r := range results {
		if r.Problem != "" {
			t.Errorf("%s: %s", r.Case.Name, r.Problem)
		}
	}
}
