// Package modeltest provides test kits for code that uses a [model.Model]:
// [Scripted], a fake model answering with canned turns, and [Run] and
// [RunErrors], conformance suites every provider adapter should pass (in
// the manner of testing/slogtest).
package modeltest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/keel-run/keel/model"
)

// Turn is one canned answer of a [Scripted] model: a response, or an error
// to return instead.
type Turn struct {
	Response *model.Response
	Err      error
}

// Text returns a turn answering with assistant text and stop reason "stop".
func Text(content string) Turn {
	return Turn{Response: &model.Response{
		Message:    model.Message{Role: model.RoleAssistant, Content: content},
		StopReason: "stop",
	}}
}

// Calls returns a turn answering with content and the given tool calls and
// stop reason "tool_calls".
func Calls(content string, calls ...model.ToolCall) Turn {
	return Turn{Response: &model.Response{
		Message:    model.Message{Role: model.RoleAssistant, Content: content, ToolCalls: calls},
		StopReason: "tool_calls",
	}}
}

// Call returns a [model.ToolCall] with id, tool name and the JSON encoding
// of args as its argument text (a string args is used verbatim, so
// malformed arguments can be scripted). It panics if args cannot be
// encoded.
func Call(id, name string, args any) model.ToolCall {
	text, ok := args.(string)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			panic(fmt.Sprintf("modeltest: Call %s: %v", name, err))
		}
		text = string(b)
	}
	return model.ToolCall{ID: id, Name: name, Arguments: text}
}

// Fail returns a turn that fails with err.
func Fail(err error) Turn { return Turn{Err: err} }

// ScriptedOptions configures [NewScripted]. The zero value is valid.
type ScriptedOptions struct {
	// Name is what [Scripted.Name] returns. "" means "scripted:test".
	Name string
}

// Scripted is a fake [model.Model] that answers the n-th call of Generate
// with the n-th scripted turn, in order, whatever the request, and records
// every request. After the script it fails with [model.KindExhausted]. It
// is safe for concurrent use (concurrent calls take turns in arrival
// order).
type Scripted struct {
	name string

	mu       sync.Mutex
	turns    []Turn
	next     int
	requests []*model.Request
}

var (
	_ model.Model = (*Scripted)(nil)
	_ model.Namer = (*Scripted)(nil)
)

// NewScripted returns a [Scripted] model playing turns with opts (nil means
// defaults). The turns are copied.
func NewScripted(turns []Turn, opts *ScriptedOptions) *Scripted {
	s := &Scripted{name: "scripted:test", turns: append([]Turn(nil), turns...)}
	if opts != nil && opts.Name != "" {
		s.name = opts.Name
	}
	return s
}

// Name returns the name given in [ScriptedOptions], "scripted:test" by
// default.
func (s *Scripted) Name() string { return s.name }

// Generate records a deep copy of req and returns the next scripted turn:
// its error, or a copy of its response with Role set to assistant. It
// returns KindExhausted after the script and KindUnknown wrapping the cause
// when ctx is done (without taking a turn).
func (s *Scripted) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	if err := ctx.Err(); err != nil {
		cause := context.Cause(ctx)
		return nil, &model.Error{Kind: model.KindUnknown, Provider: "scripted", Message: "request canceled: " + cause.Error(), Err: cause}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, CloneRequest(req))
	if s.next >= len(s.turns) {
		return nil, &model.Error{Kind: model.KindExhausted, Provider: "scripted",
			Message: fmt.Sprintf("script has %d turns; request asks for turn %d", len(s.turns), s.next+1)}
	}
	t := s.turns[s.next]
	s.next++
	if t.Err != nil {
		return nil, t.Err
	}
	if t.Response == nil {
		return nil, &model.Error{Kind: model.KindInvalidRequest, Provider: "scripted", Message: fmt.Sprintf("scripted turn %d has neither a response nor an error", s.next)}
	}
	r := *t.Response
	r.Message = cloneMessage(r.Message)
	r.Message.Role = model.RoleAssistant
	return &r, nil
}

// Requests returns deep copies of the requests received so far, in order.
func (s *Scripted) Requests() []*model.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*model.Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = CloneRequest(r)
	}
	return out
}

// Remaining returns how many scripted turns are left.
func (s *Scripted) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.turns) - s.next
}

// CloneRequest returns a deep copy of req (nil for nil).
func CloneRequest(req *model.Request) *model.Request {
	if req == nil {
		return nil
	}
	c := *req
	c.Messages = make([]model.Message, len(req.Messages))
	for i, m := range req.Messages {
		c.Messages[i] = cloneMessage(m)
	}
	c.Tools = make([]model.ToolSpec, len(req.Tools))
	for i, t := range req.Tools {
		t.Parameters = append(json.RawMessage(nil), t.Parameters...)
		c.Tools[i] = t
	}
	if req.Temperature != nil {
		t := *req.Temperature
		c.Temperature = &t
	}
	if req.Messages == nil {
		c.Messages = nil
	}
	if req.Tools == nil {
		c.Tools = nil
	}
	return &c
}

func cloneMessage(m model.Message) model.Message {
	if m.ToolCalls != nil {
		m.ToolCalls = append([]model.ToolCall(nil), m.ToolCalls...)
	}
	return m
}
