package replay

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/keel-run/keel/model"
)

// LiveOptions configures [ThenLive].
type LiveOptions struct {
	// Replay configures the recorded part.
	Replay Options
	// Volatile are patterns of tool output masked before a result is
	// compared with the recorded one (durations, clock times: they differ
	// between identical executions).
	Volatile []*regexp.Regexp
}

// Live is a [model.Model] that answers from a recording while the run
// follows it and from a live model from the first request that leaves
// it: "recorded, then live from the first divergence". A request follows
// the recording when every tool result it carries is the recorded result
// of the same call (compared as [SameResult] does), its earlier answers
// are the recorded ones, and the recording has its turn (and the turn's
// tools are offered). A request that does not (a tool gave another
// output, a call id the recording does not know, the recording is
// exhausted) goes to the live model, and so does every later one: the
// live model's answers are in their history. The decision is made from
// each request alone, so a resumed run decides as the first execution
// did. Its answers are safe for concurrent use if live's are; its
// [Live.Price] needs one call at a time.
type Live struct {
	rec  *Model
	live model.Model
	vol  []*regexp.Regexp
	// recorded says whether the last answer came from the recording.
	recorded atomic.Bool
}

var (
	_ model.Model = (*Live)(nil)
	_ model.Namer = (*Live)(nil)
)

// ThenLive returns a [Live] replaying tr, then live. opts may be nil.
func ThenLive(tr *Trajectory, live model.Model, opts *LiveOptions) *Live {
	var o LiveOptions
	if opts != nil {
		o = *opts
	}
	return &Live{rec: New(tr, &o.Replay), live: live, vol: o.Volatile}
}

// Name returns "replay:PATH" and the live model's name.
func (m *Live) Name() string {
	live := "live"
	if n, ok := m.live.(model.Namer); ok {
		live = n.Name()
	}
	return m.rec.Name() + " then " + live
}

// Generate answers req from the recording while req follows it, else
// from the live model.
func (m *Live) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	if req != nil && req.Purpose != model.PurposeSummary && m.Diverged(req) == "" {
		resp, err := m.rec.Generate(ctx, req)
		var me *model.Error
		if err == nil || !errors.As(err, &me) || (me.Kind != model.KindExhausted && me.Kind != model.KindMismatch) {
			m.recorded.Store(true)
			return resp, err
		}
	}
	m.recorded.Store(false)
	return m.live.Generate(ctx, req)
}

// Price returns a price function that prices the usage of the last
// answer at the recorded model's prices (recorded) when the recording
// gave it and at the live model's (live) when the live model did. It
// holds for one run, whose model calls come one at a time.
func (m *Live) Price(recorded, live func(model.Usage) float64) func(model.Usage) float64 {
	return func(u model.Usage) float64 {
		if m.recorded.Load() {
			return recorded(u)
		}
		return live(u)
	}
}

// Diverged returns why req no longer follows the recording (the first
// tool result that differs from the recorded one, or a call the
// recording does not have), or "" when it still does. An exhausted
// recording or a request whose history is not the recording's is found
// by the replay itself.
func (m *Live) Diverged(req *model.Request) string {
	tr := m.rec.tr
	for _, msg := range req.Messages {
		if msg.Role != model.RoleTool {
			continue
		}
		r, ok := tr.ToolResult(msg.ToolCallID)
		if !ok {
			return fmt.Sprintf("call %s is not in the recording", msg.ToolCallID)
		}
		if !SameResult(msg.Content, r, m.vol) {
			return fmt.Sprintf("call %s gave another result than the recorded one", msg.ToolCallID)
		}
	}
	return ""
}

// SameResult reports whether content, a tool result as Keel shows it to
// the model, is the recorded result r: the recorded observation itself
// (a recording of a Keel run) or its raw output, or the same exit code
// and output (the
// "exit code: N" line of Keel's shell results, then the output; a
// recording made elsewhere keeps the raw output). An output Keel shows
// in part (head and tail of a long one) matches a recorded output that
// starts with its head and ends with its tail. The volatile patterns are
// masked in both first.
func SameResult(content string, r ToolResult, volatile []*regexp.Regexp) bool {
	mask := func(s string) string {
		for _, re := range volatile {
			s = re.ReplaceAllString(s, "…")
		}
		return strings.TrimSpace(s)
	}
	if c := mask(content); c == mask(r.Content) || (r.RawOutput != "" && c == mask(r.RawOutput)) {
		return true
	}
	head, view, _ := strings.Cut(content, "\n")
	var code int
	if _, err := fmt.Sscanf(head, "exit code: %d", &code); err != nil {
		return false
	}
	if r.ExitCode >= 0 && code != r.ExitCode {
		return false
	}
	v, raw := mask(view), mask(r.RawOutput)
	if raw == "" {
		return v == "" || v == "(no output)"
	}
	if v == raw {
		return true
	}
	const edge = 200
	return len(raw) > len(v) && len(v) > 2*edge && strings.HasPrefix(raw, v[:edge]) && strings.HasSuffix(raw, v[len(v)-edge:])
}
