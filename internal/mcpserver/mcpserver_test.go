package mcpserver

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	_ "github.com/keel-run/keel/journal/sqlite" // registers the sqlite backend
	"github.com/keel-run/keel/service"
)

// start_run's schema states the service's default limits, in both forms,
// and says what 0 and a negative value mean (docs/limits.md).
func TestStartRunSchemaStatesDefaults(t *testing.T) {
	store, err := journal.Open(t.Context(), filepath.Join(t.TempDir(), "keel.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for name, srv := range map[string]*sdk.Server{
		"local":  Local(service.New(agent.NewRuntime(store, nil), nil), service.Local("tester"), nil),
		"remote": Remote("http://127.0.0.1:1", nil),
	} {
		t.Run(name, func(t *testing.T) {
			ct, st := sdk.NewInMemoryTransports()
			ss, err := srv.Connect(t.Context(), st, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ss.Close()
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			tools, err := cs.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var schema struct {
				Properties map[string]struct {
					Description string `json:"description"`
				} `json:"properties"`
			}
			for _, tl := range tools.Tools {
				if tl.Name != "start_run" {
					continue
				}
				b, _ := json.Marshal(tl.InputSchema)
				if err := json.Unmarshal(b, &schema); err != nil {
					t.Fatal(err)
				}
			}
			for prop, want := range map[string]string{
				"max_steps":  fmt.Sprintf("default %d;", service.DefaultMaxSteps),
				"max_tokens": fmt.Sprintf("default %d;", service.DefaultMaxTokens),
				"max_cost":   fmt.Sprintf("default %g;", service.DefaultMaxCost),
				"timeout":    "default 12h;",
			} {
				d := schema.Properties[prop].Description
				if !strings.Contains(d, want) || !strings.Contains(d, "no limit") {
					t.Errorf("%s: %q, want it to say %q and what 0 means", prop, d, want)
				}
			}
		})
	}
}

func TestDurationText(t *testing.T) {
	for d, want := range map[string]string{"12h": "12h", "30m": "30m", "1h30m": "1h30m", "45s": "45s", "10s": "10s", "2h0m10s": "2h0m10s"} {
		dd, _ := time.ParseDuration(d)
		if got := durationText(dd); got != want {
			t.Errorf("durationText(%s) = %q", d, got)
		}
	}
}
