package telemetry

import (
	"context"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// LiveOptions configure [NewLive].
type LiveOptions struct {
	// Exporter receives the spans of runs as their events are appended;
	// nil exports none.
	Exporter *Exporter
	// Metrics counts the events; nil counts none.
	Metrics *Metrics
	// Read reads a run's events from seq from (the journal's Read): a
	// run first seen mid-way (a resume in a new process) is derived from
	// its beginning, so that its spans keep their parents and times.
	Read func(ctx context.Context, runID string, from int64) ([]journal.Event, error)
	// QueueSize bounds the appends waiting to be processed; appends past
	// it are dropped and counted. 0 means 16384.
	QueueSize int
	// Records, when not nil, makes the export durable: each run's export
	// watermark ([Watermarks]) is advanced as the collector acknowledges
	// its spans, and when this process derives events it did not append
	// (a resume after kill -9, a restart) it exports the spans of those
	// after the watermark. Nil: events another process appended are
	// never exported here.
	Records journal.Records
}

// Live turns appended events into spans and metrics, off the appending
// goroutine: [Live.Appended] only queues. A span is exported by the
// process that appended the event ending it; events another process
// appended are read to keep the derivation whole but not exported again.
type Live struct {
	o       LiveOptions
	q       chan batch
	done    chan struct{}
	once    sync.Once
	dropped atomic.Uint64
	errs    atomic.Uint64
	closed  atomic.Bool

	marks     *Watermarks // nil: not durable
	markErrs  atomic.Uint64
	recovered atomic.Uint64

	runs map[string]*liveRun // worker goroutine only
}

type batch struct {
	events []journal.Event
	took   time.Duration
	flush  chan struct{}
	// recover, when set, names a run whose unacknowledged spans are
	// exported from the journal.
	recover string
}

type liveRun struct {
	d         *Deriver
	approvals map[string]time.Time
}

// maxLiveRuns bounds the runs whose derivation Live keeps (paused runs
// stay until they end); past it the oldest are forgotten and, when they
// continue, derived again from the journal.
const maxLiveRuns = 10000

// NewLive starts a live observer.
func NewLive(o *LiveOptions) *Live {
	l := &Live{o: *o, done: make(chan struct{}), runs: map[string]*liveRun{}}
	n := l.o.QueueSize
	if n <= 0 {
		n = 16384
	}
	l.q = make(chan batch, n)
	if l.o.Records != nil && l.o.Exporter != nil {
		l.marks = NewWatermarks(l.o.Records)
		l.o.Exporter.SetAcknowledged(func(acked map[string]int64) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for run, seq := range acked {
				if err := l.marks.Advance(ctx, run, seq); err != nil {
					l.markErrs.Add(1)
				}
			}
		})
	}
	if l.o.Metrics != nil {
		reg := l.o.Metrics.Registry()
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keel_telemetry_events_dropped_total",
			Help: "Journal events the telemetry queue had no room for (their spans and metrics are missing)."}, func() float64 { return float64(l.dropped.Load()) }))
		if e := l.o.Exporter; e != nil {
			reg.MustRegister(
				prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keel_telemetry_spans_exported_total", Help: "Spans accepted by the OTLP collector."}, func() float64 { return float64(e.Stats().Exported) }),
				prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keel_telemetry_spans_failed_total", Help: "Spans the OTLP collector rejected or that could not be sent."}, func() float64 { return float64(e.Stats().Failed) }),
				prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keel_telemetry_spans_dropped_total", Help: "Spans dropped because the export queue was full."}, func() float64 { return float64(e.Stats().Dropped) }),
				prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keel_telemetry_spans_recovered_total", Help: "Spans of earlier events (not acknowledged by the collector before a crash or restart) exported from the journal."}, func() float64 { return float64(l.recovered.Load()) }),
				prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keel_telemetry_watermark_errors_total", Help: "Export watermarks that could not be stored (their spans may be exported again after a restart)."}, func() float64 { return float64(l.markErrs.Load()) }),
			)
		}
	}
	go l.loop()
	return l
}

// Appended is the runtime's OnAppend hook: it queues the events and
// returns at once.
func (l *Live) Appended(events []journal.Event, took time.Duration) {
	if len(events) == 0 || l.closed.Load() || strings.HasPrefix(events[0].RunID, "_keel.") {
		return
	}
	select {
	case l.q <- batch{events: events, took: took}:
	default:
		l.dropped.Add(uint64(len(events)))
	}
}

// Recover queues the export of run's spans that no collector
// acknowledged (those after its export watermark), derived from the
// journal. A run this process is exporting live is left alone unless
// some of its spans were lost here. It does nothing without Records.
func (l *Live) Recover(runID string) {
	if l.marks == nil || l.closed.Load() {
		return
	}
	select {
	case l.q <- batch{recover: runID}:
	default:
		l.dropped.Add(1)
	}
}

// Durable reports whether the export is durable (an exporter and
// Records).
func (l *Live) Durable() bool { return l.marks != nil }

// Recovered counts the spans exported from the journal because no
// collector had acknowledged them.
func (l *Live) Recovered() uint64 { return l.recovered.Load() }

// RecoverPending queues [Live.Recover] for each run of runs that is not
// running, was last appended to before idle, and whose export watermark
// is behind its newest event (a run that paused or ended in a process
// killed before its spans were sent). Runs never exported live (no
// watermark) are left alone. It returns the number queued.
func (l *Live) RecoverPending(ctx context.Context, runs []journal.RunSummary, idle time.Time) (int, error) {
	if l.marks == nil {
		return 0, nil
	}
	all, err := l.marks.All(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range runs {
		r := &runs[i]
		w, ok := all[r.RunID]
		if !ok || w >= r.LastSeq || r.Status == journal.StatusRunning || r.Updated.After(idle) {
			continue
		}
		l.Recover(r.RunID)
		n++
	}
	return n, nil
}

// Dropped counts the events that did not fit the queue.
func (l *Live) Dropped() uint64 { return l.dropped.Load() }

// Flush waits until every event queued so far is processed and the
// exporter sent its spans (or ctx ends).
func (l *Live) Flush(ctx context.Context) error {
	if l.closed.Load() {
		return nil
	}
	ack := make(chan struct{})
	select {
	case l.q <- batch{flush: ack}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
	case <-ctx.Done():
		return ctx.Err()
	}
	if l.o.Exporter != nil {
		return l.o.Exporter.Flush(ctx)
	}
	return nil
}

// Close processes what is queued, flushes and shuts the exporter down.
func (l *Live) Close(ctx context.Context) error {
	err := l.Flush(ctx)
	l.once.Do(func() { l.closed.Store(true); close(l.q) })
	select {
	case <-l.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if l.o.Exporter != nil {
		if e := l.o.Exporter.Shutdown(ctx); err == nil {
			err = e
		}
	}
	return err
}

func (l *Live) loop() {
	defer close(l.done)
	for b := range l.q {
		switch {
		case b.flush != nil:
			close(b.flush)
		case b.recover != "":
			l.recoverRun(b.recover)
		default:
			l.process(b)
		}
	}
}

func (l *Live) newRun(runID string) *liveRun {
	if len(l.runs) >= maxLiveRuns {
		for k := range l.runs {
			delete(l.runs, k)
			break
		}
	}
	r := &liveRun{approvals: map[string]time.Time{}}
	if l.o.Exporter != nil {
		r.d = NewDeriver(runID, l.o.Exporter.Options())
	} else {
		r.d = NewDeriver(runID, nil)
	}
	return r
}

// catchUp folds run's events from r's next one up to (not including)
// seq until, read from the journal: events this process did not append
// (earlier executions, or another process). With durable export, the
// spans of those after the run's watermark are exported; else none.
func (l *Live) catchUp(r *liveRun, runID string, until int64) error {
	if l.o.Read == nil {
		return nil
	}
	prior, err := l.o.Read(context.Background(), runID, r.d.LastSeq()+1)
	if err != nil {
		return err
	}
	wm := int64(-1) // export nothing
	if l.marks != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		w, err := l.marks.Get(ctx, runID)
		cancel()
		if err != nil {
			l.markErrs.Add(1)
		} else {
			wm = w
		}
	}
	exported := false
	for i := range prior {
		if prior[i].Seq >= until {
			break
		}
		spans, err := r.d.Add(&prior[i])
		if err != nil {
			return err
		}
		if wm >= 0 && prior[i].Seq > wm && len(spans) > 0 {
			l.o.Exporter.Export(spans)
			l.recovered.Add(uint64(len(spans)))
			exported = true
		}
	}
	if wm >= 0 && (exported || r.d.LastSeq() > wm) {
		l.o.Exporter.Mark(runID, r.d.LastSeq())
	}
	return nil
}

// recoverRun exports the spans of run after its watermark (see
// [Live.Recover]).
func (l *Live) recoverRun(runID string) {
	if r := l.runs[runID]; r != nil {
		if !l.o.Exporter.lost(runID) {
			return // exported live here, nothing lost
		}
		delete(l.runs, runID)
	}
	l.o.Exporter.retry(runID)
	r := l.newRun(runID)
	if err := l.catchUp(r, runID, math.MaxInt64); err != nil {
		l.errs.Add(1)
		return
	}
	if r.d.created != nil && !r.d.ended {
		l.runs[runID] = r
	}
}

func (l *Live) process(b batch) {
	if m := l.o.Metrics; m != nil && b.took > 0 {
		m.ObserveAppend(b.took)
	}
	runID := b.events[0].RunID
	r := l.runs[runID]
	first := b.events[0].Seq
	if r == nil {
		r = l.newRun(runID)
		l.runs[runID] = r
	}
	if first > r.d.LastSeq()+1 {
		if err := l.catchUp(r, runID, first); err != nil {
			l.errs.Add(1)
			delete(l.runs, runID)
			return
		}
	}
	if l.marks != nil {
		defer func() { l.o.Exporter.Mark(runID, r.d.LastSeq()) }()
	}
	for i := range b.events {
		e := &b.events[i]
		if e.Seq <= r.d.LastSeq() {
			continue
		}
		p, err := agent.Decode(e)
		if err != nil {
			l.errs.Add(1)
			delete(l.runs, runID)
			return
		}
		spans, err := r.d.add(e, p)
		if err != nil {
			l.errs.Add(1)
			delete(l.runs, runID)
			return
		}
		if l.o.Exporter != nil && len(spans) > 0 {
			l.o.Exporter.Export(spans)
		}
		if l.o.Metrics != nil {
			l.o.Metrics.observe(r.d.created, r.d.spec, e, p, r.approvals)
		}
		if r.d.ended {
			delete(l.runs, runID)
			return
		}
	}
}
