package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// limited is a model whose provider limits the rate for an hour.
type limited struct{}

func (limited) Generate(context.Context, *model.Request) (*model.Response, error) {
	return nil, &model.Error{Kind: model.KindRateLimited, Provider: "openai", StatusCode: 429, RetryAfter: time.Hour, Message: "rate_limit_exceeded: quota"}
}

// A rate limit beyond the retries ends the run saying what the provider
// asked and when the run can be resumed (RunEnded.RetryAt).
func TestLongRateLimitSaysWhenToResume(t *testing.T) {
	e := newEnv(t)
	id := e.create(&agent.RunCreated{})
	out, err := e.rt.Execute(t.Context(), id, e.params(limited{}))
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC) // the env's clock, plus an hour
	if out.Status != journal.StatusFailed || out.End.Reason != agent.ReasonModelError || out.End.RetryAt == nil || !out.End.RetryAt.Equal(want) {
		t.Fatalf("status %s, end %+v; want failed with RetryAt %v", out.Status, out.End, want)
	}
	for _, s := range []string{"the provider asked to wait 1h0m0s before the next request", "it can be resumed after 2026-01-01 01:00:00 UTC"} {
		if !strings.Contains(out.End.Message, s) {
			t.Errorf("the end's message %q does not say %q", out.End.Message, s)
		}
	}
}
