package telemetry

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/telemetry/cost"
)

// SemconvVersion is the version of the OpenTelemetry semantic conventions
// (GenAI spans and attributes, Development stability) the derived spans
// follow.
const SemconvVersion = "1.41.0"

// Span is one derived span. Times come from the journal, ids from
// [TraceID] and [SpanID]: deriving a journal twice gives equal spans.
type Span struct {
	TraceID trace.TraceID
	SpanID  trace.SpanID
	// Parent is the zero id for the run's root span.
	Parent     trace.SpanID
	Name       string
	Kind       trace.SpanKind
	Start, End time.Time
	Attrs      []attribute.KeyValue
	Events     []SpanEvent
	Status     codes.Code
	StatusMsg  string
	// EndSeq is the journal event that ended the span; Open marks a span
	// of an unfinished run that [Deriver.Flush] closed at the newest
	// event.
	EndSeq int64
	Open   bool
}

// SpanEvent is an event on a span.
type SpanEvent struct {
	Name  string
	Time  time.Time
	Attrs []attribute.KeyValue
}

// TraceID is the trace id of run: the first 16 bytes of SHA-256 of
// "keel/trace/" + run id.
func TraceID(runID string) trace.TraceID {
	h := sha256.Sum256([]byte("keel/trace/" + runID))
	var id trace.TraceID
	copy(id[:], h[:16])
	return id
}

// SpanID is the id of the span of run named by key ("run", "chat/3",
// "tool/" + call id, ...): the first 8 bytes of SHA-256 of
// "keel/span/" + run id + "/" + key.
func SpanID(runID, key string) trace.SpanID {
	h := sha256.Sum256([]byte("keel/span/" + runID + "/" + key))
	var id trace.SpanID
	copy(id[:], h[:8])
	return id
}

// ChatKey is the span key of a run's n-th model call (1-based, counting
// model.responded and model.failed events).
func ChatKey(n int) string { return "chat/" + strconv.Itoa(n) }

// ToolKey is the span key of a tool call.
func ToolKey(callID string) string { return "tool/" + callID }

// RootKey is the span key of the run's invoke_agent span.
const RootKey = "run"

// Keel's own attributes (the GenAI conventions have none for these).
const (
	attrRunID        = attribute.Key("keel.run.id")
	attrRunStatus    = attribute.Key("keel.run.status")
	attrRunReason    = attribute.Key("keel.run.reason")
	attrSeq          = attribute.Key("keel.journal.seq")
	attrCost         = attribute.Key("keel.cost.usd")
	attrCostSource   = attribute.Key("keel.cost.source")
	attrModelSpec    = attribute.Key("keel.model.spec")
	attrOnBehalfOf   = attribute.Key("keel.on_behalf_of")
	attrSteps        = attribute.Key("keel.run.steps")
	attrModelCalls   = attribute.Key("keel.run.model_calls")
	attrToolCalls    = attribute.Key("keel.run.tool_calls")
	attrExitCode     = attribute.Key("keel.tool.exit_code")
	attrSynthetic    = attribute.Key("keel.tool.synthetic")
	attrAttempts     = attribute.Key("keel.tool.attempts")
	attrToolMS       = attribute.Key("keel.tool.duration_ms")
	attrTimedOut     = attribute.Key("keel.tool.timed_out")
	attrEffect       = attribute.Key("keel.gate.effect")
	attrPolicyIDs    = attribute.Key("keel.gate.policy_ids")
	attrGateReason   = attribute.Key("keel.gate.reason")
	attrDecision     = attribute.Key("keel.approval.decision")
	attrBy           = attribute.Key("keel.by")
	attrReason       = attribute.Key("keel.reason")
	attrSource       = attribute.Key("keel.source")
	attrEstimatedIn  = attribute.Key("keel.usage.estimated_input_tokens")
	attrHandoff      = attribute.Key("keel.context.handoff")
	attrTokensBefore = attribute.Key("keel.context.tokens_before")
	attrTokensAfter  = attribute.Key("keel.context.tokens_after")
	attrOpen         = attribute.Key("keel.span.open")
	attrUnknownType  = attribute.Key("keel.event.type")
	attrLabelPrefix  = "keel.label."
	userIDKey        = attribute.Key("user.id")
)

// Cost sources: where a cost figure's token counts come from (see
// package cost).
const (
	SourceProvider = cost.SourceProvider
	SourceEstimate = cost.SourceEstimate
	SourceMixed    = cost.SourceMixed
	SourceOffline  = cost.SourceOffline
)

// Options change what a derivation includes.
type Options struct {
	// Content puts prompt and completion text (the task, model outputs,
	// tool arguments and results) in spans; off by default.
	Content bool
	// Redact, when Content is on, is applied to every text before it is
	// put in a span; nil means [Redact].
	Redact func(string) string
}

// Deriver folds a run's events, in order, into spans. It is not safe for
// concurrent use.
type Deriver struct {
	runID string
	opts  Options
	trace trace.TraceID

	created   *agent.RunCreated
	root      *Span
	spec      model.Spec
	last      time.Time
	lastSeq   int64
	calls     int // model calls so far (chat span ordinal)
	steps     int
	tools     int
	usage     model.Usage
	cost      float64
	sources   map[string]bool
	respModel string           // the newest provider-reported model
	open      map[string]*Span // by span key
	openKeys  []string         // insertion order, for deterministic Flush
	ended     bool
}

// NewDeriver returns a deriver for run.
func NewDeriver(runID string, opts *Options) *Deriver {
	d := &Deriver{runID: runID, trace: TraceID(runID), open: map[string]*Span{}, sources: map[string]bool{}}
	if opts != nil {
		d.opts = *opts
	}
	if d.opts.Redact == nil {
		d.opts.Redact = redact.Text
	}
	return d
}

// LastSeq is the newest event added.
func (d *Deriver) LastSeq() int64 { return d.lastSeq }

// Derive returns every span of a run's events: the finished ones, then
// those still open at the newest event (closed there, with Open set).
func Derive(runID string, events []journal.Event, opts *Options) ([]Span, error) {
	d := NewDeriver(runID, opts)
	var out []Span
	for i := range events {
		sp, err := d.Add(&events[i])
		if err != nil {
			return nil, err
		}
		out = append(out, sp...)
	}
	return append(out, d.Flush()...), nil
}

func (d *Deriver) newSpan(key, name string, kind trace.SpanKind, parent trace.SpanID, start time.Time, attrs ...attribute.KeyValue) *Span {
	s := &Span{TraceID: d.trace, SpanID: SpanID(d.runID, key), Parent: parent, Name: name, Kind: kind, Start: start, Attrs: attrs}
	if _, dup := d.open[key]; !dup {
		d.openKeys = append(d.openKeys, key)
	}
	d.open[key] = s
	return s
}

func (d *Deriver) close(key string, end time.Time, seq int64) *Span {
	s := d.open[key]
	if s == nil {
		return nil
	}
	delete(d.open, key)
	for i, k := range d.openKeys {
		if k == key {
			d.openKeys = append(d.openKeys[:i], d.openKeys[i+1:]...)
			break
		}
	}
	if end.Before(s.Start) {
		end = s.Start
	}
	s.End, s.EndSeq = end, seq
	return s
}

func (d *Deriver) rootID() trace.SpanID { return SpanID(d.runID, RootKey) }

func (d *Deriver) text(s string) string { return d.opts.Redact(s) }

// Add folds event e and returns the spans it ended.
func (d *Deriver) Add(e *journal.Event) ([]Span, error) {
	p, err := agent.Decode(e)
	if err != nil {
		return nil, err
	}
	return d.add(e, p)
}

// add folds e whose decoded payload is p.
func (d *Deriver) add(e *journal.Event, p any) ([]Span, error) {
	if e.Seq != d.lastSeq+1 {
		return nil, fmt.Errorf("telemetry: run %s: event %d after %d", d.runID, e.Seq, d.lastSeq)
	}
	prev := d.last
	if prev.IsZero() {
		prev = e.Time
	}
	defer func() { d.last, d.lastSeq = e.Time, e.Seq }()
	if d.created == nil && e.Type != journal.RunCreated {
		return nil, fmt.Errorf("telemetry: run %s: first event is %s", d.runID, e.Type)
	}
	f, ok := derivers[e.Type]
	if !ok {
		f = (*Deriver).other // a type this version does not know
	}
	pl, _ := p.(agent.Payload)
	done := f(d, e, pl, prev)
	out := make([]Span, 0, len(done))
	for _, s := range done {
		if s != nil {
			out = append(out, *s)
		}
	}
	return out, nil
}

// derivers derive spans from each event type, one entry per type
// (view.Check): what the event adds to the open spans, and the spans it
// ends.
var derivers = map[journal.Type]func(d *Deriver, e *journal.Event, p agent.Payload, prev time.Time) []*Span{
	journal.RunCreated:          (*Deriver).runCreated,
	journal.RunResumed:          (*Deriver).runResumed,
	journal.SetupFinished:       (*Deriver).setupFinished,
	journal.ModelResponded:      (*Deriver).modelResponded,
	journal.ModelFailed:         (*Deriver).modelFailed,
	journal.GateDecided:         (*Deriver).gateDecided,
	journal.ApprovalRequested:   (*Deriver).approvalRequested,
	journal.ApprovalResolved:    (*Deriver).approvalResolved,
	journal.AuthRequired:        (*Deriver).other,
	journal.AuthResolved:        (*Deriver).other,
	journal.InputRequested:      (*Deriver).other,
	journal.InputAnswered:       (*Deriver).other,
	journal.ToolStarted:         (*Deriver).toolStarted,
	journal.ToolFinished:        (*Deriver).toolFinished,
	journal.RunCompleted:        (*Deriver).runEnded,
	journal.RunFailed:           (*Deriver).runEnded,
	journal.RunCanceled:         (*Deriver).runEnded,
	journal.RunPaused:           (*Deriver).runEnded,
	journal.UserMessage:         (*Deriver).userMessage,
	journal.ContextCompacted:    (*Deriver).contextCompacted,
	journal.SandboxEgress:       (*Deriver).sandboxEgress,
	journal.SandboxQuarantine:   (*Deriver).sandboxQuarantine,
	journal.WorkspaceCheckpoint: (*Deriver).other,
	journal.WorkspaceRestored:   (*Deriver).other,
	journal.WorkspaceRestoring:  (*Deriver).other,
	journal.ChildSpawned:        (*Deriver).other,
	journal.ChildDelivered:      (*Deriver).other,
}

func (d *Deriver) runCreated(e *journal.Event, pl agent.Payload, _ time.Time) (done []*Span) {
	p := pl.(*agent.RunCreated)
	d.created = p
	d.spec, _ = model.ParseSpec(p.Model)
	name := p.Principal
	if name == "" {
		name = "keel"
	}
	attrs := []attribute.KeyValue{
		semconv.GenAIOperationNameInvokeAgent,
		semconv.GenAIAgentName(name),
		semconv.GenAIConversationID(d.runID),
		attrRunID.String(d.runID),
		attrModelSpec.String(p.Model),
	}
	if p.Principal != "" {
		attrs = append(attrs, semconv.GenAIAgentID(p.Principal))
	}
	if p.OnBehalfOf != "" {
		attrs = append(attrs, attrOnBehalfOf.String(p.OnBehalfOf), userIDKey.String(p.OnBehalfOf))
	}
	labels := make([]string, 0, len(p.Labels))
	for k := range p.Labels {
		labels = append(labels, k)
	}
	sort.Strings(labels)
	for _, k := range labels {
		attrs = append(attrs, attribute.String(attrLabelPrefix+k, p.Labels[k]))
	}
	if d.opts.Content {
		attrs = append(attrs, semconv.GenAISystemInstructionsKey.String(d.text(p.System)),
			semconv.GenAIInputMessagesKey.String(messagesJSON([]model.Message{{Role: model.RoleUser, Content: d.text(p.Task)}})))
	}
	d.root = d.newSpan(RootKey, "invoke_agent "+name, trace.SpanKindInternal, trace.SpanID{}, e.Time, attrs...)
	return done
}

func (d *Deriver) runResumed(e *journal.Event, pl agent.Payload, _ time.Time) (done []*Span) {
	p := pl.(*agent.RunResumed)
	if p.Model != "" {
		if s, err := model.ParseSpec(p.Model); err == nil {
			d.spec = s
		}
	}
	attrs := []attribute.KeyValue{attrSeq.Int64(e.Seq), attribute.Int("keel.interrupted_calls", len(p.Interrupted))}
	if p.Model != "" {
		attrs = append(attrs, attrModelSpec.String(p.Model))
	}
	if p.By != "" {
		attrs = append(attrs, attrBy.String(p.By))
	}
	if p.Handoff {
		attrs = append(attrs, attrHandoff.Bool(true))
	}
	d.event(RootKey, "keel.run.resumed", e.Time, attrs...)
	return done
}

func (d *Deriver) setupFinished(e *journal.Event, pl agent.Payload, _ time.Time) (done []*Span) {
	p := pl.(*agent.SetupFinished)
	start := e.Time.Add(-time.Duration(p.DurationMS) * time.Millisecond)
	s := d.newSpan("setup/"+strconv.FormatInt(e.Seq, 10), "keel.setup", trace.SpanKindInternal, d.rootID(), start,
		attrExitCode.Int(p.ExitCode), attrTimedOut.Bool(p.TimedOut), attrSeq.Int64(e.Seq))
	if p.ExitCode != 0 || p.TimedOut {
		s.Status, s.StatusMsg = codes.Error, fmt.Sprintf("setup script exited %d", p.ExitCode)
	}
	done = append(done, d.close("setup/"+strconv.FormatInt(e.Seq, 10), e.Time, e.Seq))
	return done
}

func (d *Deriver) modelResponded(e *journal.Event, pl agent.Payload, prev time.Time) (done []*Span) {
	p := pl.(*agent.ModelResponded)
	d.calls++
	d.steps++
	start := e.Time.Add(-time.Duration(p.DurationMS) * time.Millisecond)
	if start.Before(prev) {
		start = prev
	}
	if p.Model != "" {
		d.respModel = p.Model
	}
	u := p.Usage
	d.usage = d.usage.Add(u)
	d.cost += p.Cost
	src := SourceProvider
	if p.UsageEstimated {
		src = SourceEstimate
	}
	d.sources[src] = true
	attrs := d.chatAttrs(p.Model, u, p.Cost, src)
	attrs = append(attrs, attrSeq.Int64(e.Seq))
	if p.ResponseID != "" {
		attrs = append(attrs, semconv.GenAIResponseID(p.ResponseID))
	}
	if p.StopReason != "" {
		attrs = append(attrs, semconv.GenAIResponseFinishReasons(p.StopReason))
	}
	if p.EstimatedInputTokens > 0 {
		attrs = append(attrs, attrEstimatedIn.Int64(p.EstimatedInputTokens))
	}
	if d.opts.Content {
		msg := p.Message
		msg.Content = d.text(msg.Content)
		for i := range msg.ToolCalls {
			msg.ToolCalls[i].Arguments = d.text(msg.ToolCalls[i].Arguments)
		}
		attrs = append(attrs, semconv.GenAIOutputMessagesKey.String(messagesJSON([]model.Message{msg})))
	}
	key := ChatKey(d.calls)
	d.newSpan(key, "chat "+d.requestModel(), trace.SpanKindClient, d.rootID(), start, attrs...)
	done = append(done, d.close(key, e.Time, e.Seq))
	return done
}

func (d *Deriver) modelFailed(e *journal.Event, pl agent.Payload, prev time.Time) (done []*Span) {
	p := pl.(*agent.ModelFailed)
	d.calls++
	key := ChatKey(d.calls)
	s := d.newSpan(key, "chat "+d.requestModel(), trace.SpanKindClient, d.rootID(), prev,
		semconv.GenAIOperationNameChat, semconv.GenAIProviderNameKey.String(d.provider("")), semconv.GenAIRequestModel(d.requestModel()),
		semconv.GenAIConversationID(d.runID), semconv.ErrorTypeKey.String(p.Kind), attrSeq.Int64(e.Seq))
	s.Status, s.StatusMsg = codes.Error, p.Message
	done = append(done, d.close(key, e.Time, e.Seq))
	return done
}

func (d *Deriver) gateDecided(e *journal.Event, pl agent.Payload, prev time.Time) (done []*Span) {
	p := pl.(*agent.GateDecided)
	s := d.toolSpan(p.CallID, p.Tool, prev)
	attrs := []attribute.KeyValue{attrEffect.String(string(p.Effect)), attrSeq.Int64(e.Seq)}
	if len(p.Policies) > 0 {
		attrs = append(attrs, attrPolicyIDs.StringSlice(p.Policies))
	}
	if p.Reason != "" {
		attrs = append(attrs, attrGateReason.String(p.Reason))
	}
	s.Events = append(s.Events, SpanEvent{Name: "keel.gate.decided", Time: e.Time, Attrs: attrs})
	s.Attrs = append(s.Attrs, attrEffect.String(string(p.Effect)))
	if len(p.Policies) > 0 {
		s.Attrs = append(s.Attrs, attrPolicyIDs.StringSlice(p.Policies))
	}
	return done
}

func (d *Deriver) approvalRequested(e *journal.Event, pl agent.Payload, prev time.Time) (done []*Span) {
	p := pl.(*agent.ApprovalRequested)
	t := d.toolSpan(p.CallID, p.Tool, prev)
	key := "approval/" + p.CallID + "/" + strconv.FormatInt(e.Seq, 10)
	attrs := []attribute.KeyValue{semconv.GenAIToolName(p.Tool), semconv.GenAIToolCallID(p.CallID), attrSeq.Int64(e.Seq)}
	if p.Reason != "" {
		attrs = append(attrs, attrReason.String(p.Reason))
	}
	if p.Expires != nil {
		attrs = append(attrs, attribute.String("keel.approval.expires", p.Expires.UTC().Format(time.RFC3339)))
	}
	d.newSpan(key, "keel.approval "+p.Tool, trace.SpanKindInternal, t.SpanID, e.Time, attrs...)
	return done
}

func (d *Deriver) approvalResolved(e *journal.Event, pl agent.Payload, _ time.Time) (done []*Span) {
	p := pl.(*agent.ApprovalResolved)
	for _, k := range d.keysWithPrefix("approval/" + p.CallID + "/") {
		s := d.open[k]
		s.Attrs = append(s.Attrs, attrDecision.String(string(p.Decision)))
		if p.By != "" {
			s.Attrs = append(s.Attrs, attrBy.String(p.By))
		}
		if p.Reason != "" {
			s.Attrs = append(s.Attrs, attrReason.String(p.Reason))
		}
		if p.Decision != "allow" {
			s.Status, s.StatusMsg = codes.Error, "denied"
		}
		done = append(done, d.close(k, e.Time, e.Seq))
	}
	return done
}

func (d *Deriver) toolStarted(e *journal.Event, pl agent.Payload, prev time.Time) (done []*Span) {
	p := pl.(*agent.ToolStarted)
	s := d.toolSpan(p.CallID, p.Tool, prev)
	attempt := p.Attempt
	if attempt == 0 {
		attempt = 1
	}
	if d.opts.Content && attempt == 1 {
		s.Attrs = append(s.Attrs, semconv.GenAIToolCallArgumentsKey.String(d.text(string(p.Arguments))))
	}
	s.Events = append(s.Events, SpanEvent{Name: "keel.tool.started", Time: e.Time, Attrs: []attribute.KeyValue{attribute.Int("keel.tool.attempt", attempt), attrSeq.Int64(e.Seq)}})
	return done
}

func (d *Deriver) toolFinished(e *journal.Event, pl agent.Payload, prev time.Time) (done []*Span) {
	p := pl.(*agent.ToolFinished)
	d.tools++
	s := d.toolSpan(p.CallID, p.Tool, prev)
	attempts := 0
	for _, ev := range s.Events {
		if ev.Name == "keel.tool.started" {
			attempts++
		}
	}
	s.Attrs = append(s.Attrs, attrAttempts.Int(attempts), attrToolMS.Int64(p.DurationMS), attrSeq.Int64(e.Seq))
	if p.ExitCode != nil {
		s.Attrs = append(s.Attrs, attrExitCode.Int(*p.ExitCode))
	}
	if p.Synthetic {
		s.Attrs = append(s.Attrs, attrSynthetic.Bool(true))
	}
	if p.TimedOut {
		s.Attrs = append(s.Attrs, attrTimedOut.Bool(true))
	}
	if d.opts.Content {
		s.Attrs = append(s.Attrs, semconv.GenAIToolCallResultKey.String(d.text(p.Content)))
	}
	if p.IsError {
		s.Status = codes.Error
		s.StatusMsg = firstLine(p.Content, 200)
		kind := "tool_error"
		switch {
		case p.TimedOut:
			kind = "timeout"
		case p.Synthetic:
			kind = "synthetic"
		}
		s.Attrs = append(s.Attrs, semconv.ErrorTypeKey.String(kind))
	}
	// An approval still waiting (a call finished without a decision,
	// such as a cancel) ends with its call.
	for _, k := range d.keysWithPrefix("approval/" + p.CallID + "/") {
		done = append(done, d.close(k, e.Time, e.Seq))
	}
	done = append(done, d.close(ToolKey(p.CallID), e.Time, e.Seq))
	return done
}

func (d *Deriver) contextCompacted(e *journal.Event, pl agent.Payload, prev time.Time) (done []*Span) {
	p := pl.(*agent.ContextCompacted)
	start := e.Time.Add(-time.Duration(p.DurationMS) * time.Millisecond)
	if start.Before(prev) {
		start = prev
	}
	key := "compaction/" + strconv.FormatInt(e.Seq, 10)
	c := d.newSpan(key, "keel.compaction", trace.SpanKindInternal, d.rootID(), start,
		attrHandoff.Bool(p.Handoff), attrReason.String(p.Reason), attrTokensBefore.Int(p.TokensBefore), attrTokensAfter.Int(p.TokensAfter), attrSeq.Int64(e.Seq))
	d.usage = d.usage.Add(p.Usage)
	d.cost += p.Cost
	if p.Model != "" || p.Usage.Total() > 0 {
		// The summary requests are model calls too: one chat span for
		// them, so that chat spans sum to the run's tokens.
		d.sources[SourceProvider] = true
		attrs := d.chatAttrs(p.Model, p.Usage, p.Cost, SourceProvider)
		attrs = append(attrs, attribute.Int("keel.summary.failed_attempts", len(p.Attempts)), attrSeq.Int64(e.Seq))
		skey := "summary/" + strconv.FormatInt(e.Seq, 10)
		d.newSpan(skey, "chat "+d.requestModel(), trace.SpanKindClient, c.SpanID, start, attrs...)
		done = append(done, d.close(skey, e.Time, e.Seq))
	}
	done = append(done, d.close(key, e.Time, e.Seq))
	return done
}

func (d *Deriver) userMessage(e *journal.Event, pl agent.Payload, _ time.Time) (done []*Span) {
	p := pl.(*agent.UserMessage)
	attrs := []attribute.KeyValue{attrSeq.Int64(e.Seq)}
	if p.Source != "" {
		attrs = append(attrs, attrSource.String(p.Source))
	}
	if p.By != "" {
		attrs = append(attrs, attrBy.String(p.By))
	}
	if d.opts.Content {
		attrs = append(attrs, attribute.String("keel.content", d.text(p.Content)))
	}
	d.event(RootKey, "keel.user.message", e.Time, attrs...)
	return done
}

func (d *Deriver) sandboxEgress(e *journal.Event, pl agent.Payload, _ time.Time) (done []*Span) {
	p := pl.(*agent.SandboxEgress)
	d.event(RootKey, "keel.sandbox.egress", e.Time, attribute.String("server.address", p.Host), attribute.Int("server.port", p.Port),
		attribute.Bool("keel.egress.allowed", p.Allowed), attrReason.String(p.Reason), attribute.String("keel.egress.phase", p.Phase))
	return done
}

func (d *Deriver) sandboxQuarantine(e *journal.Event, pl agent.Payload, _ time.Time) (done []*Span) {
	p := pl.(*agent.SandboxQuarantine)
	d.event(RootKey, "keel.sandbox.quarantine", e.Time, attribute.String("keel.path", p.Path), attribute.String("keel.action", p.Action), attrReason.String(p.Reason))
	return done
}

func (d *Deriver) runEnded(e *journal.Event, pl agent.Payload, _ time.Time) (done []*Span) {
	p := pl.(*agent.RunEnded)
	switch e.Type {
	case journal.RunPaused:
		d.event(RootKey, "keel.run.paused", e.Time, attrRunReason.String(p.Reason), attrSeq.Int64(e.Seq))
	default:
		if d.root == nil || d.ended {
			break
		}
		d.ended = true
		status := journal.StatusOf(e.Type)
		d.root.Attrs = append(d.root.Attrs, attrRunStatus.String(string(status)), attrRunReason.String(p.Reason))
		if status == journal.StatusFailed {
			d.root.Status, d.root.StatusMsg = codes.Error, firstLine(p.Message, 200)
			d.root.Attrs = append(d.root.Attrs, semconv.ErrorTypeKey.String(p.Reason))
		}
		if d.opts.Content && p.Output != "" {
			d.root.Attrs = append(d.root.Attrs, semconv.GenAIOutputMessagesKey.String(messagesJSON([]model.Message{{Role: model.RoleAssistant, Content: d.text(p.Output)}})))
		}
		// Whatever is still open ends with the run (a canceled call's
		// approval), the root last.
		for _, k := range append([]string(nil), d.openKeys...) {
			if k != RootKey {
				done = append(done, d.close(k, e.Time, e.Seq))
			}
		}
		d.finishRoot()
		done = append(done, d.close(RootKey, e.Time, e.Seq))
	}
	return done
}

// other derives an event the spans have no place for: an event named
// by its type on the run's span (also for a type this version does not
// know).
func (d *Deriver) other(e *journal.Event, _ agent.Payload, _ time.Time) (done []*Span) {
	// A type this version does not know: keep it visible.
	d.event(RootKey, string(e.Type), e.Time, attrUnknownType.String(string(e.Type)), attrSeq.Int64(e.Seq))
	return done
}

// Flush closes the spans still open (an unfinished run) at the newest
// event, marked Open, and returns them, the root last. The deriver must
// not be used afterwards.
func (d *Deriver) Flush() []Span {
	var out []Span
	keys := append([]string(nil), d.openKeys...)
	for _, k := range keys {
		if k == RootKey {
			continue
		}
		s := d.close(k, d.last, d.lastSeq)
		s.Open = true
		s.Attrs = append(s.Attrs, attrOpen.Bool(true))
		out = append(out, *s)
	}
	if d.root != nil && !d.ended {
		d.finishRoot()
		if st := d.root; st != nil {
			st.Attrs = append(st.Attrs, attrOpen.Bool(true))
		}
		s := d.close(RootKey, d.last, d.lastSeq)
		s.Open = true
		out = append(out, *s)
	}
	return out
}

// finishRoot sets the run's totals on the root span.
func (d *Deriver) finishRoot() {
	src := SourceProvider
	switch {
	case d.sources[SourceProvider] && d.sources[SourceEstimate]:
		src = SourceMixed
	case d.sources[SourceEstimate]:
		src = SourceEstimate
	}
	d.root.Attrs = append(d.root.Attrs,
		semconv.GenAIProviderNameKey.String(d.provider(d.respModel)),
		semconv.GenAIRequestModel(d.requestModel()),
		semconv.GenAIUsageInputTokens(int(d.usage.InputTokens)),
		semconv.GenAIUsageOutputTokens(int(d.usage.OutputTokens)),
		semconv.GenAIUsageCacheReadInputTokens(int(d.usage.CachedInputTokens)),
		semconv.GenAIUsageCacheCreationInputTokens(int(d.usage.CacheWriteTokens)),
		attrCost.Float64(d.cost), attrCostSource.String(src),
		attrSteps.Int(d.steps), attrModelCalls.Int(d.calls), attrToolCalls.Int(d.tools))
}

func (d *Deriver) chatAttrs(respModel string, u model.Usage, cost float64, src string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		semconv.GenAIOperationNameChat,
		semconv.GenAIProviderNameKey.String(d.provider(respModel)),
		semconv.GenAIRequestModel(d.requestModel()),
		semconv.GenAIConversationID(d.runID),
		semconv.GenAIUsageInputTokens(int(u.InputTokens)),
		semconv.GenAIUsageOutputTokens(int(u.OutputTokens)),
		semconv.GenAIUsageCacheReadInputTokens(int(u.CachedInputTokens)),
		semconv.GenAIUsageCacheCreationInputTokens(int(u.CacheWriteTokens)),
		attrCost.Float64(cost), attrCostSource.String(src),
	}
	if respModel != "" {
		attrs = append(attrs, semconv.GenAIResponseModel(respModel))
	}
	return attrs
}

// requestModel is the model name requested: the spec's name, or for a
// replay the recording's file name.
func (d *Deriver) requestModel() string {
	if d.spec.Provider == "replay" {
		n := d.spec.Name
		if i := strings.LastIndexByte(n, '/'); i >= 0 {
			n = n[i+1:]
		}
		return "replay:" + n
	}
	if d.spec.Name == "" {
		return "unknown"
	}
	return d.spec.Name
}

// provider names the provider as the GenAI conventions do.
func (d *Deriver) provider(respModel string) string {
	return ProviderName(d.spec, respModel)
}

// ProviderName is the gen_ai.provider.name of a model spec: "openai" and
// "anthropic" for their adapters, a well-known provider recognised by the
// model name for OpenAI-compatible endpoints and replays ("deepseek"),
// else "openai" for an OpenAI-compatible API and "keel.replay" or
// "keel.scripted" for Keel's own models.
func ProviderName(spec model.Spec, respModel string) string {
	switch spec.Provider {
	case "openai", "anthropic":
		return spec.Provider
	}
	name := respModel
	if name == "" && spec.Provider != "replay" {
		name = spec.Name
	}
	for _, p := range []struct{ prefix, provider string }{
		{"deepseek", "deepseek"}, {"claude", "anthropic"}, {"gpt-", "openai"}, {"o1", "openai"}, {"o3", "openai"}, {"o4", "openai"},
		{"gemini", "gcp.gemini"}, {"mistral", "mistral_ai"}, {"grok", "x_ai"}, {"llama", "meta"},
	} {
		if strings.HasPrefix(strings.ToLower(name), p.prefix) {
			return p.provider
		}
	}
	switch spec.Provider {
	case "openai-compatible":
		return "openai"
	case "":
		return "unknown"
	}
	return "keel." + spec.Provider
}

// toolSpan returns the open execute_tool span of call, opening it at
// start if needed.
func (d *Deriver) toolSpan(callID, name string, start time.Time) *Span {
	key := ToolKey(callID)
	if s := d.open[key]; s != nil {
		return s
	}
	attrs := []attribute.KeyValue{
		semconv.GenAIOperationNameExecuteTool,
		semconv.GenAIToolName(name),
		semconv.GenAIToolCallID(callID),
		semconv.GenAIToolType("function"),
		semconv.GenAIConversationID(d.runID),
	}
	return d.newSpan(key, "execute_tool "+name, trace.SpanKindInternal, d.rootID(), start, attrs...)
}

func (d *Deriver) event(key, name string, t time.Time, attrs ...attribute.KeyValue) {
	if s := d.open[key]; s != nil {
		s.Events = append(s.Events, SpanEvent{Name: name, Time: t, Attrs: attrs})
	}
}

func (d *Deriver) keysWithPrefix(prefix string) []string {
	var out []string
	for _, k := range d.openKeys {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

func firstLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// messagesJSON renders messages in the GenAI conventions' message shape
// (role and parts).
func messagesJSON(msgs []model.Message) string {
	type part struct {
		Type      string          `json:"type"`
		Content   string          `json:"content,omitempty"`
		ID        string          `json:"id,omitempty"`
		Name      string          `json:"name,omitempty"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
	}
	type msg struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	out := make([]msg, 0, len(msgs))
	for _, m := range msgs {
		mm := msg{Role: string(m.Role)}
		if m.Content != "" {
			mm.Parts = append(mm.Parts, part{Type: "text", Content: m.Content})
		}
		for _, c := range m.ToolCalls {
			var args json.RawMessage
			if json.Valid([]byte(c.Arguments)) {
				args = json.RawMessage(c.Arguments)
			} else {
				args, _ = json.Marshal(c.Arguments)
			}
			mm.Parts = append(mm.Parts, part{Type: "tool_call", ID: c.ID, Name: c.Name, Arguments: args})
		}
		if mm.Parts == nil {
			mm.Parts = []part{}
		}
		out = append(out, mm)
	}
	b, _ := json.Marshal(out)
	return string(b)
}
