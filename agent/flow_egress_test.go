package agent_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// A secret for a host (--secret-for-host) makes the run private only
// once the egress proxy put it into a request of the sandbox: the
// sandbox holds a placeholder, so before that it touched nothing
// private (fresh-user trial 5, M3: a run with such a secret asked at
// every test run after a pip install). A secret in the sandbox's
// environment (--secret-env) is private from the start.
func TestHostSecretPrivateFromItsFirstUse(t *testing.T) {
	t.Parallel()
	var evs []journal.Event
	add := func(typ journal.Type, v any) *agent.State {
		b, _ := json.Marshal(v)
		evs = append(evs, journal.Event{RunID: "r", Seq: int64(len(evs) + 1), Type: typ, Payload: b})
		st, err := agent.Fold("r", evs)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := add(journal.RunCreated, &agent.RunCreated{Task: "t", Network: []string{"api.example.com", "pypi.org"},
		SecretHosts: []agent.SecretHost{{Name: "API_TOKEN", Host: "api.example.com"}}})
	if len(st.Flow.Private) != 0 {
		t.Fatalf("private from the start: %+v", st.Flow.Private[0])
	}
	st = add(journal.SandboxEgress, &agent.SandboxEgress{Phase: "agent", Host: "pypi.org", Port: 443, Allowed: true, Method: "CONNECT"})
	if len(st.Flow.Private) != 0 {
		t.Fatalf("private after a request without the secret: %+v", st.Flow.Private[0])
	}
	for range 2 {
		st = add(journal.SandboxEgress, &agent.SandboxEgress{Phase: "agent", Host: "api.example.com", Port: 443, Allowed: true,
			Method: "GET", Path: "/repos", Substituted: []string{"API_TOKEN"}})
	}
	if len(st.Flow.Private) != 1 || st.Flow.Private[0].Seq != 3 || !strings.Contains(st.Flow.Private[0].Why, "API_TOKEN") || !st.Flow.Other {
		t.Fatalf("after the secret's first use: private %+v, other %v; want one mark at event 3", st.Flow.Private, st.Flow.Other)
	}

	env, err := agent.Fold("r", []journal.Event{{RunID: "r", Seq: 1, Type: journal.RunCreated,
		Payload: json.RawMessage(`{"task":"t","secret_env":["API_TOKEN"]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(env.Flow.Private) != 1 {
		t.Errorf("--secret-env: private %+v, want one mark from the start", env.Flow.Private)
	}
}
