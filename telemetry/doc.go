// Package telemetry derives OpenTelemetry traces, Prometheus metrics and
// cost reports from run journals.
//
// A run's trace is a pure function of its journal ([Derive]): the run is
// an invoke_agent span, each model call a chat span, each tool call an
// execute_tool span, with gate decisions, approval waits, compactions and
// the setup script as child spans or span events, following the
// OpenTelemetry GenAI semantic conventions ([SemconvVersion]). Trace and
// span ids are hashes of the run id and journal positions, so a run
// resumed after a crash continues the same trace and exporting a past run
// again ([Exporter.ExportRun]) sends the same spans.
//
// [Live] exports spans as events are appended, through a bounded queue
// that drops (and counts) spans rather than slow a run down. [Metrics]
// holds the Prometheus collectors keel serve exposes at /metrics.
// [Costs] sums cost by run, agent, user, model or label, saying where
// each figure comes from.
//
// The package reads no flags, files or environment: [Config] is filled by
// the caller (internal/config reads OTEL_* variables and config.toml).
package telemetry
