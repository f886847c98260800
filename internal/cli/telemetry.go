package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble/builder"
	"github.com/keel-run/keel/internal/config"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/telemetry"
)

// newRuntime returns a runtime on store whose appends are exported as
// spans when tracing is configured, and counted by metrics (keel serve)
// (builder.Process.Runtime). The returned function flushes the export;
// call it before closing the store.
func (a *app) newRuntime(ctx context.Context, store journal.Store, opts *agent.RuntimeOptions, metrics *telemetry.Metrics) (*agent.Runtime, func(), error) {
	p := a.process()
	if metrics != nil {
		p.Metrics = metrics
	}
	rt, _, flush, err := p.Runtime(ctx, store, opts)
	return rt, flush, err
}

func (a *app) runsTraceCmd() *cobra.Command {
	var endpoint, protocol string
	var content bool
	cmd := &cobra.Command{
		Use:         "trace RUN",
		Annotations: firstArgIsRun,
		Short:       "Export a run's trace (OpenTelemetry, GenAI conventions) to an OTLP collector",
		Long: `Trace derives the run's spans from its journal (invoke_agent, chat,
execute_tool, approvals, compactions) and sends them over OTLP. The ids are
derived from the run id and journal positions, so exporting a run again
sends the same spans, and they join the spans keel exported live.

The collector is --otlp, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
OTEL_EXPORTER_OTLP_ENDPOINT or [telemetry] endpoint in config.toml
(see docs/telemetry.md).`,
		Example: `  keel runs trace 01J... --otlp http://127.0.0.1:4318
  keel runs trace 01J... --otlp http://127.0.0.1:4317 --protocol grpc`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			tc, err := a.process().TelemetryConfig()
			if err != nil {
				return err
			}
			if protocol != "" {
				tc.Protocol = protocol
			}
			if endpoint != "" {
				tc.Endpoint = config.TracesURL(endpoint, tc.Protocol)
			}
			if cmd.Flags().Changed("content") {
				tc.Content = content
			}
			if err := tc.Validate(); err != nil {
				return &usageError{err}
			}
			if !tc.Enabled() {
				return usagef("no OTLP collector: pass --otlp URL or set OTEL_EXPORTER_OTLP_ENDPOINT")
			}
			return a.withStore(ctx, func(store journal.Store) error {
				n, err := telemetry.ExportStored(ctx, tc, store, args[0], builder.TelemetryFlush)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "%s\n", telemetry.TraceID(args[0]))
				fmt.Fprintf(a.stderr, "keel: exported %d spans of run %s (trace %s) to %s\n", n, args[0], telemetry.TraceID(args[0]), tc.Endpoint)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&endpoint, "otlp", "", "OTLP collector base URL, e.g. http://127.0.0.1:4318 (default: the OTEL_* environment or config.toml)")
	cmd.Flags().StringVar(&protocol, "protocol", "", "OTLP protocol: http/protobuf (default) or grpc")
	cmd.Flags().BoolVar(&content, "content", false, "put prompt and completion text in the spans (secrets redacted)")
	return cmd
}

// parseLabels parses --label KEY=VALUE flags (the service checks the
// keys and values, as for every front end).
func parseLabels(flags []string) (map[string]string, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range flags {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, usagef("--label %q: want KEY=VALUE", kv)
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, nil
}

func (a *app) costCmd() *cobra.Command {
	var by, since string
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "cost",
		Short: "Model cost by agent, user, model, task label or run",
		Long: `Cost sums the cost of every model call in the journal (summary calls of
compactions included), grouped by --by. Each figure is the one journaled
when the call was made: the provider's reported usage at Keel's prices
(cached input tokens at the cached price, cache writes at the write
price). SOURCE says where the tokens came from: provider (reported by the
provider), estimate (the provider reported none; Keel estimated them),
mixed, or unpriced (no price known for the model: set one under
[prices."MODEL"] in config.toml).`,
		Example: `  keel cost
  keel cost --by user --since 7d
  keel cost --by label --since 2026-11-01 --json`,
		Args:        cobra.NoArgs,
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				rep, err := b.Cost(ctx, by, since)
				if err != nil {
					return err
				}
				if jsonOut {
					enc := json.NewEncoder(a.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(rep)
				}
				tui.Cost(a.stdout, rep)
				return nil
			}, "by", "since", "json")
		},
	}
	cmd.Flags().StringVar(&by, "by", "agent", "group by agent, user (acted for), model, label (KEY=VALUE) or run")
	cmd.Flags().StringVar(&since, "since", "", "only runs created since: a duration (7d, 36h, 2w) or a date (2026-11-01)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the report as JSON")
	return cmd
}

// costBackend is what keel cost needs of a journal or a team server.
type costBackend interface {
	// Cost is the cost report of the runs created since, grouped by by
	// (service.Service.Cost).
	Cost(ctx context.Context, by, since string) (*api.CostReport, error)
}
