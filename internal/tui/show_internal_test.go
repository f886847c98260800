package tui

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/service"
)

// A fork's copied events keep their source's times, earlier than the
// fork's own run.created: the timeline counts their TIME from the first
// of them, never a negative offset ("+-5m50s"), and says where they
// came from.
func TestShowForkTimesNotNegative(t *testing.T) {
	ctx := t.Context()
	store := mem.New()
	t0 := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	payload := func(v any) json.RawMessage {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	created := &agent.RunCreated{Task: "t", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: "none"}
	src, err := store.Append(ctx, "src", 0,
		journal.Draft{Type: journal.RunCreated, Time: t0, Payload: payload(created)},
		journal.Draft{Type: journal.RunPaused, Time: t0.Add(5 * time.Second), Payload: payload(&agent.RunEnded{Reason: "user"})},
		journal.Draft{Type: journal.RunResumed, Time: t0.Add(7 * time.Second), Payload: payload(&agent.RunResumed{})})
	if err != nil {
		t.Fatal(err)
	}
	fc := *created
	fc.Labels = map[string]string{service.LabelForkOf: "src@3"}
	now := t0.Add(6 * time.Minute)
	drafts, err := service.ForkDrafts(src, &fc, now)
	if err != nil {
		t.Fatal(err)
	}
	paused, err := agent.NotStarted("fork", "src", 3, drafts, now)
	if err != nil {
		t.Fatal(err)
	}
	events, err := store.Append(ctx, "fork", 0, append(drafts, paused...)...)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := Show(&out, "fork", events, nil, nil); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.Contains(got, "+-") {
		t.Errorf("negative offsets in the timeline:\n%s", got)
	}
	for _, want := range []string{"events 2 to 3 were copied from run src", "\n2    +0s ", "\n3    +2s ", "\n4    +0s "} {
		if !strings.Contains(got, want) {
			t.Errorf("the timeline lacks %q:\n%s", want, got)
		}
	}
}

// keel runs show's header says the settings a run was created with, as
// the web UI's run page does: policy, allowed hosts, the environment's
// names (never a value) and the setup script (fresh-user trial 12, N21).
func TestShowSettings(t *testing.T) {
	created := &agent.RunCreated{Task: "t", Model: "test:none", Workspace: t.TempDir(), MountPath: "/testbed", Sandbox: "linux",
		Env: []string{"PYTHONPATH=/testbed/src", "TOKENISH=hunter2"}, SecretEnv: []string{"API_KEY"}, Network: []string{"pypi.org"},
		Setup: "echo setup-ran\npip install -e .\n", Policy: &agent.PolicyRef{Name: "team.toml", SHA256: "b3a0a00a557d0123"}}
	b, err := json.Marshal(created)
	if err != nil {
		t.Fatal(err)
	}
	events, err := mem.New().Append(t.Context(), "r", 0, journal.Draft{Type: journal.RunCreated, Time: time.Now(), Payload: b})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := Show(&out, "r", events, nil, nil); err != nil {
		t.Fatal(err)
	}
	want := "task: t\npolicy team.toml (sha256 b3a0a00a557d) · allowed hosts: pypi.org\n" +
		"environment: PYTHONPATH, TOKENISH, API_KEY (secret) (values not shown)\nsetup script:\n    echo setup-ran\n    pip install -e .\n"
	if got := out.String(); !strings.Contains(got, want) {
		t.Errorf("the header lacks\n%s\nin\n%s", want, got)
	}
	if strings.Contains(out.String(), "hunter2") || strings.Contains(out.String(), "/testbed/src") {
		t.Errorf("the header shows an environment variable's value:\n%s", out.String())
	}
}

// keel runs show says what started a run that no person started, as the
// API's origin and the web UI's run page do: the schedule and its fire,
// the trigger and its message.
func TestShowSaysWhatStartedTheRun(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"keel.schedule": "askme", "keel.fire": "2026-12-07T06:00:00Z"}, "started by: schedule askme (fire 2026-12-07T06:00:00Z)\n"},
		{map[string]string{"keel.trigger": "spy", "keel.message": "run:01abc@4"}, "started by: trigger spy (message run:01abc@4)\n"},
		{nil, ""},
	} {
		b, err := json.Marshal(&agent.RunCreated{Task: "t", Model: "test:none", Workspace: "/w", MountPath: "/workspace", Sandbox: "none", Labels: tt.labels})
		if err != nil {
			t.Fatal(err)
		}
		events, err := mem.New().Append(t.Context(), "r", 0, journal.Draft{Type: journal.RunCreated, Time: t0, Payload: b})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if _, err := Show(&out, "r", events, nil, nil); err != nil {
			t.Fatal(err)
		}
		if got := out.String(); tt.want != "" && !strings.Contains(got, tt.want) || tt.want == "" && strings.Contains(got, "started by") {
			t.Errorf("labels %v: want %q in\n%s", tt.labels, tt.want, got)
		}
	}
}
