package agent_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
)

// A decision that comes after the approval's deadline does not count:
// Resolve applies the default decision instead and says so, the listing
// marks the approval expired, and the call never runs.
func TestLateDecisionAfterDeadline(t *testing.T) {
	for _, tt := range []struct {
		name string
		def  policy.Effect
		ran  int
	}{
		{"default deny", "", 0},
		{"default allow", policy.Allow, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			var now atomic.Int64
			now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			e.rt = agent.NewRuntime(e.store, &agent.RuntimeOptions{Clock: func() time.Time { return time.Unix(0, now.Load()).UTC() }})
			withBash(e)
			m := &script{turns: []model.Message{calls(bash("c1", "rm x")), answer("done")}}
			id := e.create(&agent.RunCreated{Policy: policyRef(t, askRm), Approval: &agent.ApprovalSettings{Timeout: agent.Duration(2 * time.Second), Default: tt.def}})
			if out, err := e.rt.Execute(t.Context(), id, e.params(m)); err != nil || out.Status != journal.StatusPaused {
				t.Fatalf("%v %v", out, err)
			}
			list, err := e.rt.Approvals(t.Context(), nil)
			if err != nil || len(list) != 1 || list[0].Expired {
				t.Fatalf("before the deadline: %+v %v", list, err)
			}
			now.Add(int64(3 * time.Second))
			list, err = e.rt.Approvals(t.Context(), nil)
			if err != nil || len(list) != 1 || !list[0].Expired {
				t.Fatalf("after the deadline: %+v %v", list, err)
			}
			// The late decision is the opposite of the default.
			late := policy.Allow
			if tt.def == policy.Allow {
				late = policy.Deny
			}
			err = e.rt.Resolve(t.Context(), id, "c1", &agent.ApprovalResolved{Decision: late, By: "ann", Reason: "late"})
			if !errors.Is(err, agent.ErrApprovalExpired) {
				t.Fatalf("late Resolve = %v, want ErrApprovalExpired", err)
			}
			st, _, err := e.rt.Load(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			r := st.Turns[0].Calls[0].Resolved
			want := tt.def
			if want == "" {
				want = policy.Deny
			}
			if r == nil || r.By != agent.ByTimeout || r.Decision != want {
				t.Fatalf("resolution %+v, want the default %s by %s", r, want, agent.ByTimeout)
			}
			if list, _ := e.rt.Approvals(t.Context(), nil); len(list) != 0 {
				t.Errorf("still pending: %+v", list)
			}
			if err := e.rt.Resolve(t.Context(), id, "c1", &agent.ApprovalResolved{Decision: late, By: "ann"}); !errors.Is(err, agent.ErrNoApproval) {
				t.Errorf("a second late Resolve = %v", err)
			}
			// Denied, the run's only call never ran: no completion.
			wantStatus := journal.StatusCompleted
			if tt.ran == 0 {
				wantStatus = journal.StatusFailed
			}
			if out, err := e.rt.Execute(t.Context(), id, e.params(m)); err != nil || out.Status != wantStatus {
				t.Fatalf("resume: %v %v", out, err)
			}
			if got := len(e.log.get()); got != tt.ran {
				t.Errorf("the call ran %d times, want %d", got, tt.ran)
			}
		})
	}
}
