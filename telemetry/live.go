package telemetry

import (
	"context"
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

	runs map[string]*liveRun // worker goroutine only
}

type batch struct {
	events []journal.Event
	took   time.Duration
	flush  chan struct{}
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
	if l.o.Metrics != nil {
		reg := l.o.Metrics.Registry()
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keel_telemetry_events_dropped_total",
			Help: "Journal events the telemetry queue had no room for (their spans and metrics are missing)."}, func() float64 { return float64(l.dropped.Load()) }))
		if e := l.o.Exporter; e != nil {
			reg.MustRegister(
				prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keel_telemetry_spans_exported_total", Help: "Spans accepted by the OTLP collector."}, func() float64 { return float64(e.Stats().Exported) }),
				prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keel_telemetry_spans_failed_total", Help: "Spans the OTLP collector rejected or that could not be sent."}, func() float64 { return float64(e.Stats().Failed) }),
				prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keel_telemetry_spans_dropped_total", Help: "Spans dropped because the export queue was full."}, func() float64 { return float64(e.Stats().Dropped) }),
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
		if b.flush != nil {
			close(b.flush)
			continue
		}
		l.process(b)
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
		if len(l.runs) >= maxLiveRuns {
			for k := range l.runs {
				delete(l.runs, k)
				break
			}
		}
		r = &liveRun{approvals: map[string]time.Time{}}
		if l.o.Exporter != nil {
			r.d = NewDeriver(runID, l.o.Exporter.Options())
		} else {
			r.d = NewDeriver(runID, nil)
		}
		l.runs[runID] = r
	}
	if first > r.d.LastSeq()+1 && l.o.Read != nil {
		// Events this process did not append (earlier executions, or
		// another process): fold them without exporting.
		prior, err := l.o.Read(context.Background(), runID, r.d.LastSeq()+1)
		if err != nil {
			l.errs.Add(1)
			delete(l.runs, runID)
			return
		}
		for i := range prior {
			if prior[i].Seq >= first {
				break
			}
			if _, err := r.d.Add(&prior[i]); err != nil {
				l.errs.Add(1)
				delete(l.runs, runID)
				return
			}
		}
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
