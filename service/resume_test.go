package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/testrun"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// A resume of a run that waits for a person's decision is decided in
// one place for every front end (fresh-user trial 9, N11: the command
// line journaled run.resumed and run.paused at every try, the API
// refused it as a conflict and so hid a bad flag): bringing nothing, it
// attaches to the wait and journals nothing; bringing a message, a
// limit or a setting other than the run's own, it goes on (the run
// pauses again at the same call); a bad value is refused first.
func TestResumeOfWaitingRun(t *testing.T) {
	ctx := t.Context()
	rt := agent.NewRuntime(mem.New(), nil)
	id := testrun.Paused(t, rt.Store(), nil, "rm old.log", 0)
	st, _, err := rt.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	steps := func(n int) *api.Limits { return &api.Limits{MaxSteps: &n} }
	own := st.Limits.MaxSteps
	cases := []struct {
		name   string
		req    api.ResumeRun
		attach bool
		code   string
	}{
		{"nothing", api.ResumeRun{}, true, ""},
		{"the run's own step limit", api.ResumeRun{Limits: steps(own)}, true, ""},
		{"another step limit", api.ResumeRun{Limits: steps(2)}, false, ""},
		{"a message", api.ResumeRun{Message: "use git rm"}, false, ""},
		{"a setting", api.ResumeRun{Settings: &api.Settings{CommandTimeout: "90s"}}, false, ""},
		{"a negative timeout", api.ResumeRun{Settings: &api.Settings{CommandTimeout: "-5s"}}, false, api.CodeInvalidRequest},
		{"a negative step limit", api.ResumeRun{Limits: steps(-1)}, false, api.CodeInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan, err := service.PlanResume(st, &c.req)
			if c.code != "" {
				wantCode(t, err, c.code)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan.Attach != c.attach {
				t.Errorf("Attach = %v, want %v (changes %+v)", plan.Attach, c.attach, plan.Changes)
			}
		})
	}
	if _, err := service.PlanResume(st, &api.ResumeRun{Settings: &api.Settings{CommandTimeout: "-5s"}}); err == nil ||
		err.Error() != `settings.command_timeout "-5s": want a positive duration such as 90s` {
		t.Errorf("a negative command timeout: %v", err)
	}

	// Through the service (the API's resume): an attach answers with the
	// run as it is, journaling nothing and queuing nothing; a refusal
	// journals nothing either.
	svc := service.New(rt, nil)
	defer svc.Shutdown(context.WithoutCancel(ctx))
	me := service.Local("ada")
	for range 2 {
		run, err := svc.Resume(ctx, me, id, &api.ResumeRun{})
		if err != nil {
			t.Fatalf("resume of a waiting run: %v", err)
		}
		if run.Status != string(journal.StatusPaused) || len(run.Pending) != 1 || run.Queued || run.Executing || run.Events != st.LastSeq {
			t.Errorf("resume = %+v, want the run as it was (paused, waiting for c1, %d events, nothing queued)", run, st.LastSeq)
		}
	}
	_, err = svc.Resume(ctx, me, id, &api.ResumeRun{Settings: &api.Settings{CommandTimeout: "-5s"}, Message: "hi"})
	wantCode(t, err, api.CodeInvalidRequest)
	evs, err := rt.Store().Read(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; int64(len(evs)) != st.LastSeq || last.Type != journal.ApprovalRequested {
		t.Errorf("after the resumes the journal has %d events, the newest %s; want %d, approval.requested", len(evs), last.Type, st.LastSeq)
	}

	// A completed run without a message is refused in the same words
	// whoever resumes it.
	done := &agent.State{RunID: "r1", Status: journal.StatusCompleted, Created: st.Created, Settings: st.Settings}
	_, err = service.PlanResume(done, &api.ResumeRun{Message: "  "})
	wantCode(t, err, api.CodeRunCompleted)
	if !strings.Contains(err.Error(), "nothing to resume") {
		t.Errorf("completed run: %v", err)
	}
}

// A run a limit stopped is not resumed under limits it would stop at
// again at once (the execution journaled run.resumed and failed again,
// a message unread): every front end refuses it in one way, naming the
// limit and a value that goes on; a raised or lifted limit goes on.
func TestResumeStillAtLimit(t *testing.T) {
	steps := func(n int) *api.Limits { return &api.Limits{MaxSteps: &n} }
	stopped := &agent.State{RunID: "r1", Status: journal.StatusFailed, Steps: 2, Created: &agent.RunCreated{Task: "t"},
		Limits: agent.Limits{MaxSteps: 2}, Settings: agent.DefaultSettings(), Ended: &agent.RunEnded{Reason: agent.ReasonMaxSteps}}
	for _, c := range []struct {
		name string
		req  api.ResumeRun
		want string // "": goes on
	}{
		{"nothing", api.ResumeRun{}, "run r1 stopped at a limit it would stop at again at once (step limit reached: 2 model calls): raise max_steps (--max-steps), to 4 for example, or give 0 to lift it"},
		{"a message", api.ResumeRun{Message: "go on"}, "step limit reached: 2 model calls"},
		{"the same limit", api.ResumeRun{Limits: steps(2)}, "step limit reached"},
		{"a lower limit", api.ResumeRun{Limits: steps(1)}, "step limit reached: 2 model calls, over the limit of 1"},
		{"a raised limit", api.ResumeRun{Limits: steps(4)}, ""},
		{"a lifted limit", api.ResumeRun{Limits: steps(0)}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := service.PlanResume(stopped, &c.req)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, err, api.CodeInvalidRequest)
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v, want %q", err, c.want)
			}
		})
	}
}
