package telemetry

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/telemetry/cost"
)

// Snapshot is the state of a server's runs at one moment, for the gauges
// read at each scrape.
type Snapshot struct {
	// ByStatus counts runs by journal status ("running", "paused", ...).
	ByStatus map[string]int
	// Active runs are being executed by a worker; Waiting ones are
	// paused for an approval.
	Active, Waiting int
	// Approvals are the request times of the approvals waiting.
	Approvals []time.Time
}

// Metrics holds Keel's Prometheus collectors. Events reach it through
// [Live]; the run gauges come from the function given to [NewMetrics].
type Metrics struct {
	reg *prometheus.Registry

	steps         *prometheus.CounterVec
	runsEnded     *prometheus.CounterVec
	modelDuration *prometheus.HistogramVec
	toolDuration  *prometheus.HistogramVec
	tokens        *prometheus.CounterVec
	cost          *prometheus.CounterVec
	gate          *prometheus.CounterVec
	approvalWait  prometheus.Histogram
	appendLatency prometheus.Histogram
	sandboxStart  prometheus.Histogram
}

// NewMetrics returns the collectors, registered in a registry of their
// own with the Go and process collectors. snapshot, if not nil, is called
// at each scrape for the run gauges; now gives approval ages.
func NewMetrics(snapshot func() Snapshot, now func() time.Time) *Metrics {
	if now == nil {
		now = time.Now
	}
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.steps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keel_steps_total", Help: "Model responses (steps) of runs, by agent."}, []string{"agent"})
	m.runsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keel_runs_ended_total", Help: "Runs that completed, failed, were canceled or paused, by status, reason and agent."}, []string{"status", "reason", "agent"})
	m.modelDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "keel_model_call_duration_seconds", Help: "Model call latency, by provider and requested model.",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300}}, []string{"provider", "model"})
	m.toolDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "keel_tool_duration_seconds", Help: "Tool call latency (the tool's run, without gate or approval waits), by tool.",
		Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"tool"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keel_tokens_total", Help: "Model tokens by type (input, output, cached_input, cache_write; cached and cache-write tokens are part of input), model, agent and user acted for."},
		[]string{"type", "model", "agent", "user"})
	m.cost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keel_cost_usd_total", Help: "Model cost in US dollars by model, agent, user acted for and source (provider: provider-reported usage at Keel's prices; estimate: Keel's token estimate; offline: a replay's or the scripted model's calls, which spend nothing and count 0)."},
		[]string{"model", "agent", "user", "source"})
	m.gate = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keel_gate_decisions_total", Help: "Gate decisions by effect (allow, ask, deny) and policy id."}, []string{"effect", "policy"})
	m.approvalWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "keel_approval_wait_seconds", Help: "Time from an approval request to its decision.",
		Buckets: []float64{1, 10, 60, 300, 1800, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600}})
	m.appendLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "keel_journal_append_duration_seconds", Help: "Journal append latency (one append of one or more events).",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5}})
	m.sandboxStart = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "keel_sandbox_start_duration_seconds", Help: "Time to start a run's sandbox.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5}})
	m.reg.MustRegister(m.steps, m.runsEnded, m.modelDuration, m.toolDuration, m.tokens, m.cost, m.gate, m.approvalWait, m.appendLatency, m.sandboxStart,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if snapshot != nil {
		m.reg.MustRegister(&runsCollector{snapshot: snapshot, now: now})
	}
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is the registry the collectors are in (to add more).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveSandboxStart records the time one sandbox took to start.
func (m *Metrics) ObserveSandboxStart(d time.Duration) { m.sandboxStart.Observe(d.Seconds()) }

// ObserveAppend records one journal append's latency.
func (m *Metrics) ObserveAppend(d time.Duration) { m.appendLatency.Observe(d.Seconds()) }

// observe counts one event of a run whose run.created is c.
func (m *Metrics) observe(c *agent.RunCreated, spec model.Spec, e *journal.Event, p any, approvals map[string]time.Time) {
	agentName, user := "keel", ""
	if c != nil {
		if c.Principal != "" {
			agentName = c.Principal
		}
		user = c.OnBehalfOf
	}
	switch p := p.(type) {
	case *agent.ModelResponded:
		m.steps.WithLabelValues(agentName).Inc()
		name := cost.ModelLabel(spec, p.Model)
		m.modelDuration.WithLabelValues(ProviderName(spec, p.Model), name).Observe(float64(p.DurationMS) / 1000)
		m.usage(name, agentName, user, p.Usage, p.Cost, p.UsageEstimated, cost.Offline(spec, c))
	case *agent.ContextCompacted:
		if p.Usage.Total() > 0 {
			m.usage(cost.ModelLabel(spec, p.Model), agentName, user, p.Usage, p.Cost, false, cost.Offline(spec, c))
		}
	case *agent.ToolFinished:
		if !p.Synthetic {
			m.toolDuration.WithLabelValues(p.Tool).Observe(float64(p.DurationMS) / 1000)
		}
	case *agent.GateDecided:
		pols := p.Policies
		if len(pols) == 0 {
			pols = []string{""}
		}
		for _, id := range pols {
			m.gate.WithLabelValues(string(p.Effect), id).Inc()
		}
	case *agent.ApprovalRequested:
		approvals[p.CallID] = e.Time
	case *agent.ApprovalResolved:
		if t, ok := approvals[p.CallID]; ok {
			m.approvalWait.Observe(e.Time.Sub(t).Seconds())
			delete(approvals, p.CallID)
		}
	case *agent.RunEnded:
		m.runsEnded.WithLabelValues(string(journal.StatusOf(e.Type)), p.Reason, agentName).Inc()
	}
}

// usage counts one model call's tokens and cost; an offline call's
// (cost.Offline: a replay's or the scripted model's) cost is no spend
// and counts 0 under source offline, as keel cost counts it.
func (m *Metrics) usage(modelName, agentName, user string, u model.Usage, cost float64, estimated, offline bool) {
	for _, t := range []struct {
		typ string
		n   int64
	}{{"input", u.InputTokens}, {"output", u.OutputTokens}, {"cached_input", u.CachedInputTokens}, {"cache_write", u.CacheWriteTokens}} {
		if t.n > 0 {
			m.tokens.WithLabelValues(t.typ, modelName, agentName, user).Add(float64(t.n))
		}
	}
	src := SourceProvider
	switch {
	case offline:
		src, cost = SourceOffline, 0
	case estimated:
		src = SourceEstimate
	}
	m.cost.WithLabelValues(modelName, agentName, user, src).Add(cost)
}

// runsCollector reports the run gauges from a snapshot taken at scrape.
type runsCollector struct {
	snapshot func() Snapshot
	now      func() time.Time
}

var (
	descRuns        = prometheus.NewDesc("keel_runs", "Runs in the journal by status.", []string{"status"}, nil)
	descActive      = prometheus.NewDesc("keel_runs_active", "Runs a worker of this server executes now.", nil, nil)
	descWaiting     = prometheus.NewDesc("keel_runs_waiting", "Runs paused for an approval.", nil, nil)
	descApprovals   = prometheus.NewDesc("keel_approvals_waiting", "Approvals waiting for a decision.", nil, nil)
	descApprovalAge = prometheus.NewDesc("keel_approvals_oldest_age_seconds", "Age of the oldest approval waiting (0 when none).", nil, nil)
)

func (c *runsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRuns
	ch <- descActive
	ch <- descWaiting
	ch <- descApprovals
	ch <- descApprovalAge
}

func (c *runsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	for _, st := range []string{"running", "paused", "completed", "failed", "canceled"} {
		ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(s.ByStatus[st]), st)
	}
	ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(s.Active))
	ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(s.Waiting))
	ch <- prometheus.MustNewConstMetric(descApprovals, prometheus.GaugeValue, float64(len(s.Approvals)))
	oldest := 0.0
	now := c.now()
	for _, t := range s.Approvals {
		oldest = max(oldest, now.Sub(t).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(descApprovalAge, prometheus.GaugeValue, oldest)
}
