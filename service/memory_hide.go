package service

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/memory"
	"github.com/keel-run/keel/server/api"
)

// A run's events hold the text of the memory entries it was offered
// (run.created's recall), wrote (memory_write's arguments, in the
// model's response, the call and any approval) and found
// (memory_search's result). The rule [Service.seesMemory] applies to
// them too: what a caller reads of a run has the text of every entry it
// may not see replaced by a note naming the entry, wherever it appears
// in a payload, so that no route to a run (its events, their stream, the
// run page, the MCP servers) shows an entry the memory routes answer
// "not found" for. What a model says in its own words of an entry stays
// the run's.

// hiddenMemory is the memory a caller may not see: each entry's texts
// (all its versions) by id.
type hiddenMemory struct {
	texts map[string]string // text -> entry id
	ids   map[string]bool
	// writes resolves the scope a memory_write call of the run writes
	// to; sees reports whether the caller sees it. A call's text is
	// hidden before its entry exists (as the run's stream shows it).
	writes memory.Scopes
	sees   func(memory.Scope) bool
}

// hiddenMemory returns the memory who may not see in run id, or nil
// when it sees all of it.
func (s *Service) hiddenMemory(ctx context.Context, who *Caller, id string) (*hiddenMemory, error) {
	h, err := s.hiddenEntries(ctx, who)
	if h == nil || err != nil {
		return nil, err
	}
	return s.forRun(ctx, h, id), nil
}

// hiddenEntries returns the entries who may not see, for any run (nil
// when who sees all memory).
func (s *Service) hiddenEntries(ctx context.Context, who *Caller) (*hiddenMemory, error) {
	if who.admin() {
		return nil, nil
	}
	list, err := s.memoryStore().List(ctx, &memory.ListParams{All: true})
	if err != nil {
		return nil, err
	}
	h := &hiddenMemory{texts: map[string]string{}, ids: map[string]bool{},
		sees: func(sc memory.Scope) bool { return s.seesMemory(who, sc) }}
	for _, e := range list {
		if s.seesMemory(who, e.Scope) || strings.TrimSpace(e.Text) == "" {
			continue
		}
		h.texts[e.Text] = e.ID
		h.ids[e.ID] = true
	}
	return h, nil
}

// forRun returns h for run id (the scopes its memory_write calls
// write to).
func (s *Service) forRun(ctx context.Context, h *hiddenMemory, id string) *hiddenMemory {
	r := *h
	r.writes = memory.Scopes{}
	if c, err := s.Created(ctx, id); err == nil && c != nil {
		r.writes, _ = MemoryScopes(c.Principal, c.OnBehalfOf, c.Workspace)
	}
	return &r
}

// writeHidden reports whether the text of a memory_write call with
// arguments args is hidden: the caller does not see the scope it writes
// to (or it names none the run has).
func (h *hiddenMemory) writeHidden(args map[string]any) bool {
	kind, _ := args["scope"].(string)
	if kind == "" {
		kind = memory.KindAgent
	}
	sc, err := h.writes.Resolve(kind)
	return err != nil || !h.sees(sc)
}

// hideNote replaces the text of entry id.
func hideNote(id string) string {
	return "[memory entry " + id + ": not yours to see]"
}

// event returns e with the hidden memory's text replaced (e itself when
// it holds none).
func (h *hiddenMemory) event(e journal.Event) journal.Event {
	if h == nil || len(e.Payload) == 0 {
		return e
	}
	if !h.mentioned(e.Payload) && !bytes.Contains(e.Payload, []byte(memory.WriteTool)) {
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(e.Payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		e.Payload, e.Redacted = json.RawMessage(`{}`), true
		return e
	}
	v = h.walk(v)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		e.Payload, e.Redacted = json.RawMessage(`{}`), true
		return e
	}
	e.Payload, e.Redacted = json.RawMessage(bytes.TrimSpace(b.Bytes())), true
	return e
}

// mentioned reports whether raw may hold hidden memory: an entry's id
// or text (as it is, or escaped as JSON within JSON).
func (h *hiddenMemory) mentioned(raw []byte) bool {
	for id := range h.ids {
		if bytes.Contains(raw, []byte(id)) {
			return true
		}
	}
	for t := range h.texts {
		if bytes.Contains(raw, []byte(t)) {
			return true
		}
		if q, err := json.Marshal(t); err == nil && bytes.Contains(raw, q[1:len(q)-1]) {
			return true
		}
	}
	return false
}

// walk replaces hidden texts in v's strings, and the text and term of
// an object naming a hidden entry by id (a recall line, a use).
func (h *hiddenMemory) walk(v any) any {
	switch x := v.(type) {
	case string:
		return h.text(x)
	case []any:
		for i := range x {
			x[i] = h.walk(x[i])
		}
	case map[string]any:
		id, _ := x["id"].(string)
		write := x["tool"] == memory.WriteTool || x["name"] == memory.WriteTool
		for k, val := range x {
			switch {
			case h.ids[id] && (k == "text" || k == "term"):
				x[k] = hideNote(id)
			case write && (k == "arguments" || k == "input" || k == "args"):
				x[k] = h.writeArgs(val)
			default:
				x[k] = h.walk(val)
			}
		}
	}
	return v
}

// writeArgs hides the text of memory_write arguments v (an object, or
// JSON of one in a string) when the caller does not see their scope.
func (h *hiddenMemory) writeArgs(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["text"]; ok && h.writeHidden(x) {
			x["text"] = "[memory text: not yours to see]"
		}
		return h.walk(x)
	case string:
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(x))
		dec.UseNumber()
		if dec.Decode(&m) != nil {
			return h.walk(x)
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if enc.Encode(h.writeArgs(m)) != nil {
			return "{}"
		}
		return strings.TrimSpace(b.String())
	}
	return h.walk(v)
}

// text returns s with every hidden text in it replaced, also where s is
// JSON that holds it escaped (a call's arguments as a string).
func (h *hiddenMemory) text(s string) string {
	for t, id := range h.texts {
		if strings.Contains(s, t) {
			s = strings.ReplaceAll(s, t, hideNote(id))
		}
		if q, err := json.Marshal(t); err == nil {
			if esc := string(q[1 : len(q)-1]); esc != t && strings.Contains(s, esc) {
				s = strings.ReplaceAll(s, esc, hideNote(id))
			}
		}
	}
	return s
}

// Events returns run id's events from seq from on as who may read
// them: the text of memory entries who may not see is replaced (see
// above).
func (s *Service) Events(ctx context.Context, who *Caller, id string, from int64) ([]journal.Event, error) {
	evs, err := s.rt.Store().Read(ctx, id, from)
	if err != nil {
		return nil, err
	}
	return s.HideMemory(ctx, who, id, evs)
}

// HideMemory returns events evs of run id as who may read them (see
// [Service.Events]): evs itself when who sees all memory, else a copy.
func (s *Service) HideMemory(ctx context.Context, who *Caller, id string, evs []journal.Event) ([]journal.Event, error) {
	h, err := s.hiddenMemory(ctx, who, id)
	if err != nil || h == nil {
		return evs, err
	}
	out := make([]journal.Event, len(evs))
	for i := range evs {
		out[i] = h.event(evs[i])
	}
	return out, nil
}

// MemoryHider returns a function that hides from an event of run id
// what who may not see of memory (see [Service.Events]), for a stream
// of events: it looks at memory again when an event names an entry.
func (s *Service) MemoryHider(ctx context.Context, who *Caller, id string) func(journal.Event) journal.Event {
	if who.admin() {
		return func(e journal.Event) journal.Event { return e }
	}
	var h *hiddenMemory
	var err error
	return func(e journal.Event) journal.Event {
		if h == nil || err != nil || bytes.Contains(e.Payload, []byte("mem_")) {
			h, err = s.hiddenMemory(ctx, who, id)
		}
		if err != nil {
			return journal.Event{RunID: e.RunID, Seq: e.Seq, Type: e.Type, Time: e.Time, Payload: json.RawMessage(`{}`),
				PrevHash: e.PrevHash, Hash: e.Hash, Redacted: true}
		}
		return h.event(e)
	}
}

// hideApprovals hides memory text in the arguments of approvals list
// (see [Service.Events]).
func (s *Service) hideApprovals(ctx context.Context, who *Caller, list []api.Approval) error {
	all, err := s.hiddenEntries(ctx, who)
	if all == nil || err != nil {
		return err
	}
	for i := range list {
		list[i].Arguments = s.forRun(ctx, all, list[i].RunID).args(list[i].Tool, list[i].Arguments)
	}
	return nil
}

// args returns a call's arguments a with hidden memory replaced.
func (h *hiddenMemory) args(tool string, a json.RawMessage) json.RawMessage {
	if len(a) == 0 {
		return a
	}
	e := h.event(journal.Event{Payload: json.RawMessage(`{"tool":` + strconvQuote(tool) + `,"arguments":` + string(a) + `}`)})
	var v struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	if json.Unmarshal(e.Payload, &v) == nil && len(v.Arguments) > 0 {
		return v.Arguments
	}
	return a
}

// hideRuns hides, in runs as who reads them, memory text in their
// pending approvals, output and message (each a copy of the summary's).
func (s *Service) hideRuns(ctx context.Context, who *Caller, runs []api.Run) error {
	all, err := s.hiddenEntries(ctx, who)
	if all == nil || err != nil || (len(all.ids) == 0 && !anyPending(runs)) {
		return err
	}
	for i := range runs {
		r := &runs[i]
		r.Output, r.Message = all.text(r.Output), all.text(r.Message)
		if len(r.Pending) > 0 {
			h := s.forRun(ctx, all, r.ID)
			r.Pending = slices.Clone(r.Pending)
			for j := range r.Pending {
				r.Pending[j].Arguments = h.args(r.Pending[j].Tool, r.Pending[j].Arguments)
			}
		}
	}
	return nil
}

func anyPending(runs []api.Run) bool {
	return slices.ContainsFunc(runs, func(r api.Run) bool { return len(r.Pending) > 0 })
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
