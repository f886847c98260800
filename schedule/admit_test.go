package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/keel-run/keel/policy"
)

func TestCheckUnattended(t *testing.T) {
	t.Parallel()
	asks, err := policy.Parse("asks.cedar", []byte(`@id("all") permit(principal, action, resource);
@id("rm") @ask forbid(principal, action, resource) when { resource has name && resource.name == "rm" };`))
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := policy.Parse("quiet.cedar", []byte(`@id("all") permit(principal, action, resource);`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		p       *policy.Engine
		timeout time.Duration
		sinks   []string
		refused bool
	}{
		{"asks, nobody told", asks, 0, nil, true},
		{"asks, a sink", asks, 0, []string{"oncall"}, false},
		{"asks, a timeout", asks, time.Hour, nil, false},
		{"never asks", quiet, 0, nil, false},
		{"the default policy asks", policy.Default(), 0, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckUnattended("schedule nightly", tt.p, tt.timeout, tt.sinks)
			if got := errors.Is(err, ErrInvalid); got != tt.refused {
				t.Errorf("CheckUnattended = %v, refused %v", err, tt.refused)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	s, _, clk, _ := newTest(t, time.Hour)
	s.opts.OnFire = m.Observe
	create(t, s, Schedule{Name: "m", Spec: every(time.Minute)})
	for range 3 {
		clk.Add(time.Minute)
		tick(t, s)
	}
	if got := testutil.ToFloat64(m.fires.WithLabelValues("m", "fired")); got != 1 {
		t.Errorf("fired = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.fires.WithLabelValues("m", "skipped")); got != 2 {
		t.Errorf("skipped = %v, want 2", got)
	}
	if n, err := testutil.GatherAndCount(reg, "keel_schedule_lateness_seconds"); err != nil || n != 1 {
		t.Errorf("lateness series = %d, %v", n, err)
	}
}

func TestCredentialWarnings(t *testing.T) {
	t.Parallel()
	next := time.Date(2026, 12, 8, 9, 0, 0, 0, time.UTC)
	grants := []Grant{
		{Provider: "github", Status: "active", Expiry: next.Add(-time.Hour), Refreshable: true},
		{Provider: "jira", Status: "active", Expiry: next.Add(-time.Hour)},
		{Provider: "slack", Status: "expired"},
		{Provider: "slack", Status: "revoked"},
		{Provider: "linear", Status: "active", Expiry: next.Add(time.Hour)},
	}
	got := CredentialWarnings([]string{"github", "jira", "slack", "linear", "notion"}, grants, "ci-bot", next)
	want := []string{"jira", "slack", "notion"}
	if len(got) != len(want) {
		t.Fatalf("warnings %q, want one each for %v", got, want)
	}
	for i, p := range want {
		if !strings.Contains(got[i], p) {
			t.Errorf("warning %d = %q, want one about %s", i, got[i], p)
		}
	}
}
