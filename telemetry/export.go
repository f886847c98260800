package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/keel-run/keel/journal"
)

// Protocols of [Config.Protocol] (the values of OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Config configures trace export. The zero value exports nothing.
type Config struct {
	// Endpoint is where spans go: for http/protobuf the full URL of the
	// traces endpoint ("http://127.0.0.1:4318/v1/traces"), for grpc the
	// collector's URL ("http://127.0.0.1:4317"; http means no TLS).
	// Empty: tracing is off.
	Endpoint string
	// Protocol is ProtocolHTTP (default) or ProtocolGRPC.
	Protocol string
	// Headers are sent with every export (authentication to a vendor).
	Headers map[string]string
	// ServiceName is the resource's service.name; empty means "keel".
	ServiceName string
	// Resource holds further resource attributes (OTEL_RESOURCE_ATTRIBUTES).
	Resource map[string]string
	// Timeout bounds one export request; 0 means 10 seconds.
	Timeout time.Duration
	// QueueSize bounds the spans waiting for export; spans beyond it are
	// dropped and counted. 0 means 4096.
	QueueSize int
	// BatchDelay is the longest a span waits for its batch; 0 means
	// 200 ms.
	BatchDelay time.Duration
	// Content puts prompt and completion text in spans (redacted); off
	// by default.
	Content bool
	// Version is the service.version (Keel's version).
	Version string
}

// Enabled reports whether c exports anything.
func (c *Config) Enabled() bool { return c != nil && c.Endpoint != "" }

// Validate checks the endpoint and protocol.
func (c *Config) Validate() error {
	switch c.Protocol {
	case "", ProtocolHTTP, ProtocolGRPC:
	default:
		return fmt.Errorf("telemetry: OTLP protocol %q: want %s or %s", c.Protocol, ProtocolHTTP, ProtocolGRPC)
	}
	if c.Endpoint == "" {
		return nil
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("telemetry: OTLP endpoint %q: want an http:// or https:// URL", c.Endpoint)
	}
	return nil
}

// Stats counts what an [Exporter] did with the spans given to it.
type Stats struct {
	// Exported spans were accepted by the collector; Failed ones were
	// rejected or could not be sent; Dropped ones did not fit the queue.
	Exported, Failed, Dropped uint64
}

// Exporter sends derived spans over OTLP. It never blocks its caller: a
// span that does not fit the bounded queue is dropped and counted.
type Exporter struct {
	tp   *sdktrace.TracerProvider
	tr   trace.Tracer
	proc *queueProcessor
	cfg  Config
}

// NewExporter returns an exporter for cfg, which must be enabled.
func NewExporter(ctx context.Context, cfg *Config) (*Exporter, error) {
	if !cfg.Enabled() {
		return nil, errors.New("telemetry: no OTLP endpoint")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	var exp sdktrace.SpanExporter
	var err error
	switch cfg.Protocol {
	case ProtocolGRPC:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(cfg.Endpoint), otlptracegrpc.WithTimeout(timeout)}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(cfg.Endpoint), otlptracehttp.WithTimeout(timeout)}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	return newExporter(exp, cfg), nil
}

// newExporter wraps a span exporter (tests pass an in-memory one).
func newExporter(exp sdktrace.SpanExporter, cfg *Config) *Exporter {
	name := cfg.ServiceName
	if name == "" {
		name = "keel"
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(name)}
	if cfg.Version != "" {
		attrs = append(attrs, semconv.ServiceVersion(cfg.Version))
	}
	for k, v := range cfg.Resource {
		if k != string(semconv.ServiceNameKey) {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, attrs...)
	q := cfg.QueueSize
	if q <= 0 {
		q = 4096
	}
	delay := cfg.BatchDelay
	if delay <= 0 {
		delay = 200 * time.Millisecond
	}
	proc := newQueueProcessor(exp, q, delay)
	limits := sdktrace.NewSpanLimits()
	limits.EventCountLimit = 4096
	limits.AttributeCountLimit = 256
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithIDGenerator(journalIDs{}),
		sdktrace.WithSpanProcessor(proc),
		sdktrace.WithRawSpanLimits(limits),
	)
	return &Exporter{tp: tp, tr: tp.Tracer("github.com/keel-run/keel/telemetry", trace.WithSchemaURL(semconv.SchemaURL)), proc: proc, cfg: *cfg}
}

// Options returns the derivation options cfg asks for.
func (e *Exporter) Options() *Options { return &Options{Content: e.cfg.Content} }

// Export queues spans for export; it never blocks.
func (e *Exporter) Export(spans []Span) {
	for i := range spans {
		e.emit(&spans[i])
	}
}

// ExportRun derives a run's trace from its events and exports it,
// waiting until it is sent (or ctx ends). Exporting the same journal
// again sends the same spans.
func (e *Exporter) ExportRun(ctx context.Context, runID string, events []journal.Event) (int, error) {
	spans, err := Derive(runID, events, e.Options())
	if err != nil {
		return 0, err
	}
	e.Export(spans)
	return len(spans), e.Flush(ctx)
}

// Flush waits until every queued span was sent or failed.
func (e *Exporter) Flush(ctx context.Context) error { return e.tp.ForceFlush(ctx) }

// Stats returns the exporter's counts so far.
func (e *Exporter) Stats() Stats { return e.proc.stats() }

// Mark queues a marker after the spans exported so far: once every span
// of run queued before it has reached the collector, the function given
// to [Exporter.SetAcknowledged] is called with run's seq. A span of run
// that was dropped or failed holds back every later marker of run (in
// this process), so an acknowledged position never skips a lost span.
func (e *Exporter) Mark(runID string, seq int64) { e.proc.mark(runID, seq) }

// SetAcknowledged sets the function called, on the exporter's goroutine,
// with the newest acknowledged position of each run (see
// [Exporter.Mark]). Set it before the first Mark.
func (e *Exporter) SetAcknowledged(f func(acked map[string]int64)) { e.proc.onAck.Store(&f) }

// lost reports whether a span of run was dropped or failed in this
// process since the last [Exporter.retry] of run.
func (e *Exporter) lost(runID string) bool { return e.proc.isPoisoned(TraceID(runID)) }

// retry forgets that spans of run were lost: the caller exports them
// again.
func (e *Exporter) retry(runID string) { e.proc.unpoison(TraceID(runID)) }

// Shutdown flushes and stops the exporter.
func (e *Exporter) Shutdown(ctx context.Context) error { return e.tp.Shutdown(ctx) }

type idsKey struct{}

// journalIDs gives the SDK the ids the deriver computed, carried in the
// context of Start.
type journalIDs struct{}

func (journalIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	s, _ := ctx.Value(idsKey{}).(*Span)
	if s == nil {
		return trace.TraceID{1}, trace.SpanID{1}
	}
	return s.TraceID, s.SpanID
}

func (journalIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	s, _ := ctx.Value(idsKey{}).(*Span)
	if s == nil {
		return trace.SpanID{1}
	}
	return s.SpanID
}

func (e *Exporter) emit(s *Span) {
	ctx := context.WithValue(context.Background(), idsKey{}, s)
	if s.Parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: s.TraceID, SpanID: s.Parent, TraceFlags: trace.FlagsSampled, Remote: true}))
	}
	_, sp := e.tr.Start(ctx, s.Name, trace.WithTimestamp(s.Start), trace.WithSpanKind(s.Kind), trace.WithAttributes(s.Attrs...))
	for _, ev := range s.Events {
		sp.AddEvent(ev.Name, trace.WithTimestamp(ev.Time), trace.WithAttributes(ev.Attrs...))
	}
	if s.Status != codes.Unset {
		sp.SetStatus(s.Status, s.StatusMsg)
	}
	sp.End(trace.WithTimestamp(s.End))
}

// queueProcessor is a span processor with a bounded queue that drops
// (and counts) rather than block, and exports in batches from one
// goroutine.
type queueProcessor struct {
	exp   sdktrace.SpanExporter
	q     chan item
	delay time.Duration
	flush chan chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	exported, failed, dropped atomic.Uint64

	onAck atomic.Pointer[func(map[string]int64)]
	// poisoned holds the traces some of whose spans were dropped or
	// failed: their markers are not acknowledged.
	mu       sync.Mutex
	poisoned map[trace.TraceID]bool
}

// item is a span, or (span nil) a marker of run at seq.
type item struct {
	span  sdktrace.ReadOnlySpan
	trace trace.TraceID
	run   string
	seq   int64
}

func (p *queueProcessor) poison(id trace.TraceID) {
	p.mu.Lock()
	p.poisoned[id] = true
	p.mu.Unlock()
}

func (p *queueProcessor) unpoison(id trace.TraceID) {
	p.mu.Lock()
	delete(p.poisoned, id)
	p.mu.Unlock()
}

func (p *queueProcessor) isPoisoned(id trace.TraceID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.poisoned[id]
}

func (p *queueProcessor) mark(runID string, seq int64) {
	id := TraceID(runID)
	select {
	case <-p.stop:
		p.poison(id)
		return
	default:
	}
	select {
	case p.q <- item{trace: id, run: runID, seq: seq}:
	default:
		p.poison(id)
	}
}

const maxBatch = 512

func newQueueProcessor(exp sdktrace.SpanExporter, size int, delay time.Duration) *queueProcessor {
	p := &queueProcessor{exp: exp, q: make(chan item, size), delay: delay,
		flush: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{}), poisoned: map[trace.TraceID]bool{}}
	go p.loop()
	return p
}

func (p *queueProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (p *queueProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	select {
	case <-p.stop:
		p.dropped.Add(1)
		p.poison(s.SpanContext().TraceID())
		return
	default:
	}
	select {
	case p.q <- item{span: s}:
	default:
		p.dropped.Add(1)
		p.poison(s.SpanContext().TraceID())
	}
}

func (p *queueProcessor) loop() {
	defer close(p.done)
	batch := make([]sdktrace.ReadOnlySpan, 0, maxBatch)
	marks := map[string]item{}
	timer := time.NewTimer(p.delay)
	defer timer.Stop()
	send := func() {
		if len(batch) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := p.exp.ExportSpans(ctx, batch)
			cancel()
			if err != nil {
				p.failed.Add(uint64(len(batch)))
				for _, s := range batch {
					p.poison(s.SpanContext().TraceID())
				}
			} else {
				p.exported.Add(uint64(len(batch)))
			}
			clear(batch)
			batch = batch[:0]
		}
		if len(marks) == 0 {
			return
		}
		// Every span queued before these markers has been sent: the
		// markers of runs none of whose spans was lost are acknowledged.
		acked := make(map[string]int64, len(marks))
		for run, m := range marks {
			if !p.isPoisoned(m.trace) {
				acked[run] = m.seq
			}
		}
		clear(marks)
		if f := p.onAck.Load(); f != nil && len(acked) > 0 {
			(*f)(acked)
		}
	}
	add := func(it item) {
		if it.span == nil {
			if it.seq > marks[it.run].seq {
				marks[it.run] = it
			}
			return
		}
		batch = append(batch, it.span)
		if len(batch) == maxBatch {
			send()
		}
	}
	drain := func() {
		for {
			select {
			case it := <-p.q:
				add(it)
			default:
				send()
				return
			}
		}
	}
	for {
		select {
		case it := <-p.q:
			add(it)
		case <-timer.C:
			send()
			timer.Reset(p.delay)
		case ack := <-p.flush:
			drain()
			close(ack)
		case <-p.stop:
			drain()
			return
		}
	}
}

func (p *queueProcessor) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case p.flush <- ack:
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *queueProcessor) Shutdown(ctx context.Context) error {
	p.once.Do(func() { close(p.stop) })
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.exp.Shutdown(ctx)
}

func (p *queueProcessor) stats() Stats {
	return Stats{Exported: p.exported.Load(), Failed: p.failed.Load(), Dropped: p.dropped.Load()}
}

// ParseHeaders parses the OTEL_EXPORTER_OTLP_HEADERS format:
// "key1=value1,key2=value2", values URL-encoded.
func ParseHeaders(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("telemetry: header %q: want key=value", kv)
		}
		dv, err := url.QueryUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("telemetry: header %q: %w", k, err)
		}
		out[k] = dv
	}
	return out, nil
}
