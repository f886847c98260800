package schedule

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are Prometheus metrics per schedule (Temporal's missed
// catch-up metric is per namespace only: nobody can tell which schedule
// missed). Pass [Metrics.Observe] as [Options.OnFire].
type Metrics struct {
	fires    *prometheus.CounterVec
	lateness *prometheus.HistogramVec
}

// NewMetrics registers the metrics on reg:
// keel_schedule_fires_total{schedule, outcome} and
// keel_schedule_lateness_seconds{schedule} (how late fires that started a
// run were decided).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keel_schedule_fires_total",
			Help: "Fire records made by this process, by schedule and outcome (fired, caught_up, skipped, missed, buffered)."}, []string{"schedule", "outcome"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "keel_schedule_lateness_seconds",
			Help:    "How long after its due time a fire that started a run was decided, by schedule.",
			Buckets: []float64{1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600}}, []string{"schedule"}),
	}
	reg.MustRegister(m.fires, m.lateness)
	return m
}

// Observe counts one record.
func (m *Metrics) Observe(s *Schedule, f *Fire) {
	m.fires.WithLabelValues(s.Name, string(f.Outcome)).Inc()
	if f.ran() {
		m.lateness.WithLabelValues(s.Name).Observe(f.Late.D().Seconds())
	}
}
