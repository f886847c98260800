package service

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/memory"
	"github.com/keel-run/keel/server/api"
)

// A run's events hold the text of the memory entries it was offered
// (run.created's recall), wrote (memory_write's arguments, in the
// model's response, the call and any approval, and the entry its result
// names) and found (memory_search's result). The rule
// [Service.seesMemory] applies to them too: what a caller reads of a run
// has what the run holds of an entry in a scope the caller may not see
// replaced by a note that names no entry, so that no route to a run (its
// events, their stream, the run page, the MCP servers) shows an entry
// the memory routes answer "not found" for.
//
// What is hidden is known from the run's own journal (its provenance),
// never by looking for an entry's words in other scopes: the run's recall
// entries, its memory_search results and its memory_write calls, each
// with its scope, from the event where the run got it on. The text of
// such an entry is hidden where the run repeats it after that (the
// model quoting it, a command writing it to a file); text that merely
// equals an entry the run never held is the run's own, so a run's view
// says nothing of memory it was not given. What the model says of an
// entry in its own words stays the run's.

// hiddenNote replaces the text of an entry a reader may not see, and
// hiddenID its id.
const (
	hiddenNote = "[memory entry: not yours to see]"
	hiddenID   = "hidden"
)

// runMemory is what a run's journal holds of memory, the same for every
// reader: each entry (or memory_write call) with its scope and the event
// from which the run holds it.
type runMemory struct {
	// seq is the newest event learned.
	seq int64
	// scopes are the run's (run.created), for its memory_write calls.
	scopes memory.Scopes
	// writes maps the run's memory_write calls to the scope each writes
	// to ("" when it names none the run has).
	writes map[string]memory.Scope
	items  []heldMemory
}

// heldMemory is one entry, or one memory_write call's text, a run holds.
type heldMemory struct {
	since int64
	scope memory.Scope
	id    string // "" for a call's text
	text  string // "" for an id alone (a write's result)
}

// learn adds what event e (the event after m.seq) holds of memory.
func (m *runMemory) learn(e *journal.Event) {
	m.seq = e.Seq
	switch e.Type {
	case journal.RunCreated:
	case journal.ModelResponded, journal.ApprovalRequested, journal.ToolStarted:
		if !bytes.Contains(e.Payload, []byte(memory.WriteTool)) {
			return
		}
	case journal.ToolFinished:
		if !bytes.Contains(e.Payload, []byte(memory.WriteTool)) && !bytes.Contains(e.Payload, []byte(memory.SearchTool)) {
			return
		}
	default:
		return
	}
	v, err := agent.Decode(e)
	if err != nil {
		return
	}
	switch x := v.(type) {
	case *agent.RunCreated:
		m.scopes, _ = MemoryScopes(x.Principal, x.OnBehalfOf, x.Workspace)
		if x.Recall != nil {
			for _, r := range x.Recall.Entries {
				m.add(e.Seq, memory.Scope(r.Scope), r.ID, r.Text)
			}
		}
	case *agent.ModelResponded:
		for _, c := range x.Message.ToolCalls {
			if c.Name == memory.WriteTool {
				m.write(e.Seq, c.ID, []byte(c.Arguments))
			}
		}
	case *agent.ApprovalRequested:
		if x.Tool == memory.WriteTool {
			m.write(e.Seq, x.CallID, x.Arguments)
		}
	case *agent.ToolStarted:
		if x.Tool == memory.WriteTool {
			m.write(e.Seq, x.CallID, x.Arguments)
		}
	case *agent.ToolFinished:
		switch x.Tool {
		case memory.WriteTool:
			// The scope its call wrote to ("": a result with no call
			// before it, hidden from all but admins).
			sc := m.writes[x.CallID]
			for _, id := range memory.WrittenIDs(x.Content) {
				m.add(e.Seq, sc, id, "")
			}
		case memory.SearchTool:
			for _, f := range memory.ParseSearch(x.Content) {
				m.add(e.Seq, f.Scope, f.ID, f.Text)
			}
		}
	}
}

// write learns memory_write call id with arguments args, once.
func (m *runMemory) write(seq int64, id string, args json.RawMessage) {
	if _, ok := m.writes[id]; ok {
		return
	}
	var in struct {
		Text  string `json:"text"`
		Scope string `json:"scope"`
	}
	_ = json.Unmarshal(args, &in) // a malformed call writes nothing
	if m.writes == nil {
		m.writes = map[string]memory.Scope{}
	}
	m.writes[id] = m.resolve(in.Scope)
	m.add(seq, m.writes[id], "", in.Text)
}

// resolve returns the scope of the run a memory_write call's scope kind
// names ("" when it names none).
func (m *runMemory) resolve(kind string) memory.Scope {
	if kind == "" {
		kind = memory.KindAgent
	}
	sc, err := m.scopes.Resolve(kind)
	if err != nil {
		return ""
	}
	return sc
}

func (m *runMemory) add(seq int64, sc memory.Scope, id, text string) {
	if id == "" && strings.TrimSpace(text) == "" {
		return
	}
	m.items = append(m.items, heldMemory{since: seq, scope: sc, id: id, text: text})
}

// heldMemories caches each run's runMemory, learned incrementally: a
// read learns only the events appended since.
type heldMemories struct {
	store journal.Store
	mu    sync.Mutex
	runs  map[string]*heldRun
}

type heldRun struct {
	mu sync.Mutex
	m  runMemory
}

// through returns what run id holds of memory up to event seq at least:
// it learns e (one of the run's events, as stored, or nil) when e is the
// next event, else reads the events it has not learned.
func (c *heldMemories) through(ctx context.Context, id string, seq int64, e *journal.Event) (runMemory, error) {
	c.mu.Lock()
	r := c.runs[id]
	if r == nil {
		r = &heldRun{}
		c.runs[id] = r
	}
	c.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.m.seq >= seq:
	case e != nil && e.Seq == r.m.seq+1 && e.Seq == seq:
		r.m.learn(e)
	default:
		evs, err := c.store.Read(ctx, id, r.m.seq+1)
		if err != nil {
			return runMemory{}, err
		}
		for i := range evs {
			r.m.learn(&evs[i])
		}
	}
	m := r.m
	m.writes, m.items = nil, slices.Clip(m.items)
	return m, nil
}

// heldRuns returns the service's cache of what runs hold of memory.
func (s *Service) heldRuns() *heldMemories {
	s.heldOnce.Do(func() { s.held = &heldMemories{store: s.rt.Store(), runs: map[string]*heldRun{}} })
	return s.held
}

// heldMemory returns what run id holds of memory, up to event seq at
// least (its newest when 0).
func (s *Service) heldMemory(ctx context.Context, id string, seq int64) (runMemory, error) {
	if seq <= 0 {
		seq = math.MaxInt64
	}
	return s.heldRuns().through(ctx, id, seq, nil)
}

// hiddenMemory is what a reader may not see of what a run holds.
type hiddenMemory struct {
	scopes memory.Scopes
	sees   func(memory.Scope) bool
	items  []heldMemory
}

// hidden returns what who may not see of m, or nil when it sees all.
func (s *Service) hidden(who *Caller, m runMemory) *hiddenMemory {
	if who.admin() {
		return nil
	}
	h := &hiddenMemory{scopes: m.scopes, sees: func(sc memory.Scope) bool { return s.seesMemory(who, sc) }}
	for _, it := range m.items {
		if !h.sees(it.scope) {
			h.items = append(h.items, it)
		}
	}
	if len(h.items) == 0 {
		return nil
	}
	return h
}

// hider hides, in one event (or value), what the reader may not see of
// the memory the run holds at that event.
type hider struct {
	h       *hiddenMemory
	texts   []string // longest first
	ids     map[string]bool
	changed bool
}

// at returns the hider of the run's event seq, or nil when the run holds
// nothing hidden then.
func (h *hiddenMemory) at(seq int64) *hider {
	if h == nil {
		return nil
	}
	x := &hider{h: h, ids: map[string]bool{}}
	for _, it := range h.items {
		if it.since > seq {
			continue
		}
		if it.id != "" {
			x.ids[it.id] = true
		}
		if it.text != "" && !slices.Contains(x.texts, it.text) {
			x.texts = append(x.texts, it.text)
		}
	}
	if len(x.ids) == 0 && len(x.texts) == 0 {
		return nil
	}
	slices.SortStableFunc(x.texts, func(a, b string) int { return len(b) - len(a) })
	return x
}

// event returns e with the hidden memory replaced (e itself when it
// holds none): marked Redacted only when its payload changed.
func (h *hiddenMemory) event(e journal.Event) journal.Event {
	x := h.at(e.Seq)
	if x == nil || len(e.Payload) == 0 || !x.mentioned(e.Payload) {
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(e.Payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		e.Payload, e.Redacted = json.RawMessage(`{}`), true
		return e
	}
	v = x.walk(v)
	if !x.changed {
		return e
	}
	b, err := encode(v)
	if err != nil {
		e.Payload, e.Redacted = json.RawMessage(`{}`), true
		return e
	}
	e.Payload, e.Redacted = b, true
	return e
}

func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSpace(b.Bytes()), nil
}

// mentioned reports whether raw may hold hidden memory: an id or text
// (as it is, or escaped as JSON within JSON), or a memory tool's call.
func (x *hider) mentioned(raw []byte) bool {
	if bytes.Contains(raw, []byte(memory.WriteTool)) || bytes.Contains(raw, []byte(memory.SearchTool)) {
		return true
	}
	for id := range x.ids {
		if bytes.Contains(raw, []byte(id)) {
			return true
		}
	}
	for _, t := range x.texts {
		for _, f := range forms(t) {
			if bytes.Contains(raw, []byte(f)) {
				return true
			}
		}
	}
	return false
}

// forms returns t and t escaped as a JSON string's content (with and
// without HTML escaping), as t appears in JSON held in a string.
func forms(t string) []string {
	out := []string{t}
	if q, err := json.Marshal(t); err == nil {
		out = append(out, string(q[1:len(q)-1]))
	}
	if q, err := encode(t); err == nil {
		out = append(out, string(q[1:len(q)-1]))
	}
	return slices.Compact(out)
}

// walk replaces hidden memory in v: the text and term of an object
// naming a hidden entry by id (a recall line, a use), the text of a
// memory_write call to a hidden scope, the hidden entries of a
// memory_search result, and the hidden texts and ids in every string.
func (x *hider) walk(v any) any {
	switch y := v.(type) {
	case string:
		return x.text(y)
	case []any:
		for i := range y {
			y[i] = x.walk(y[i])
		}
	case map[string]any:
		id, _ := y["id"].(string)
		name, _ := y["tool"].(string)
		if n, ok := y["name"].(string); ok && name == "" {
			name = n
		}
		for k, val := range y {
			switch {
			case x.ids[id] && (k == "text" || k == "term"):
				y[k] = hiddenNote
				x.changed = true
			case name == memory.WriteTool && (k == "arguments" || k == "input" || k == "args"):
				y[k] = x.writeArgs(val)
			case name == memory.SearchTool && k == "content":
				if s, ok := val.(string); ok {
					s, changed := memory.HideSearch(s, func(f memory.Found) bool { return x.ids[f.ID] }, hiddenID, hiddenNote)
					x.changed = x.changed || changed
					y[k] = x.text(s)
				}
			default:
				y[k] = x.walk(val)
			}
		}
	}
	return v
}

// writeArgs hides the text of memory_write arguments v (an object, or
// JSON of one in a string) when the reader does not see their scope.
func (x *hider) writeArgs(v any) any {
	switch y := v.(type) {
	case map[string]any:
		kind, _ := y["scope"].(string)
		m := runMemory{scopes: x.h.scopes}
		if _, ok := y["text"]; ok && !x.h.sees(m.resolve(kind)) && y["text"] != hiddenNote {
			y["text"] = hiddenNote
			x.changed = true
		}
		return x.walk(y)
	case string:
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(y))
		dec.UseNumber()
		if dec.Decode(&m) != nil {
			return x.text(y)
		}
		was := x.changed
		x.changed = false
		w := x.writeArgs(m)
		changed := x.changed
		x.changed = was || changed
		if !changed {
			return y
		}
		b, err := encode(w)
		if err != nil {
			return "{}"
		}
		return string(b)
	}
	return x.walk(v)
}

// text returns s with every hidden text in it replaced, also where s is
// JSON that holds it escaped (a call's arguments as a string), and
// every hidden id.
func (x *hider) text(s string) string {
	for _, t := range x.texts {
		for _, f := range forms(t) {
			if strings.Contains(s, f) {
				s = strings.ReplaceAll(s, f, hiddenNote)
				x.changed = true
			}
		}
	}
	for id := range x.ids {
		if strings.Contains(s, id) {
			s = strings.ReplaceAll(s, id, hiddenID)
			x.changed = true
		}
	}
	return s
}

// Events returns run id's events from seq from on as who may read
// them: what the run holds of memory who may not see is hidden (see
// above).
func (s *Service) Events(ctx context.Context, who *Caller, id string, from int64) ([]journal.Event, error) {
	evs, err := s.rt.Store().Read(ctx, id, from)
	if err != nil {
		return nil, err
	}
	return s.HideMemory(ctx, who, id, evs)
}

// HideMemory returns events evs of run id (in order, as stored) as who
// may read them (see [Service.Events]): evs itself when who may see all
// they hold, else a copy.
func (s *Service) HideMemory(ctx context.Context, who *Caller, id string, evs []journal.Event) ([]journal.Event, error) {
	if who.admin() || len(evs) == 0 {
		return evs, nil
	}
	m, err := s.heldMemory(ctx, id, evs[len(evs)-1].Seq)
	if err != nil {
		return nil, err
	}
	h := s.hidden(who, m)
	if h == nil {
		return evs, nil
	}
	out := make([]journal.Event, len(evs))
	for i := range evs {
		out[i] = h.withhold(h.event(evs[i]))
	}
	return out, nil
}

// withhold returns e without its hashes when it is at or after the first
// event that holds memory the reader may not see: the hash of that event
// and of every event after it commits to the hidden text (the chain
// links each to the one before), so a reader given any of them could
// test a guess of the text offline (journal.VerifyShown checks the rest;
// the server's audit verifies the whole chain).
func (h *hiddenMemory) withhold(e journal.Event) journal.Event {
	if h == nil {
		return e
	}
	for _, it := range h.items {
		if it.since <= e.Seq {
			e.PrevHash, e.Hash = "", ""
			break
		}
	}
	return e
}

// MemoryHider returns a function that hides from an event of run id
// what who may not see of memory (see [Service.Events]), for a stream
// of its events in order.
func (s *Service) MemoryHider(ctx context.Context, who *Caller, id string) func(journal.Event) journal.Event {
	if who.admin() {
		return func(e journal.Event) journal.Event { return e }
	}
	held := s.heldRuns()
	var m runMemory
	var h *hiddenMemory
	failed := false
	return func(e journal.Event) journal.Event {
		if m.seq < e.Seq {
			var err error
			if m, err = held.through(ctx, id, e.Seq, &e); err != nil {
				m = runMemory{}
				failed = true
			} else {
				h = s.hidden(who, m)
			}
		}
		if failed {
			// Unknown what it holds: hidden whole, from here on.
			return journal.Event{RunID: e.RunID, Seq: e.Seq, Type: e.Type, Time: e.Time, Payload: json.RawMessage(`{}`), Redacted: true}
		}
		return h.withhold(h.event(e))
	}
}

// hideApprovals hides memory in the arguments of approvals list (see
// [Service.Events]).
func (s *Service) hideApprovals(ctx context.Context, who *Caller, list []api.Approval) error {
	if who.admin() {
		return nil
	}
	for i := range list {
		m, err := s.heldMemory(ctx, list[i].RunID, list[i].Seq)
		if err != nil {
			return err
		}
		list[i].Arguments = s.hidden(who, m).args(list[i].Tool, list[i].Arguments)
	}
	return nil
}

// args returns a call's arguments a with hidden memory replaced.
func (h *hiddenMemory) args(tool string, a json.RawMessage) json.RawMessage {
	if h == nil || len(a) == 0 {
		return a
	}
	e := h.event(journal.Event{Seq: math.MaxInt64, Payload: json.RawMessage(`{"tool":` + strconvQuote(tool) + `,"arguments":` + string(a) + `}`)})
	if !e.Redacted {
		return a
	}
	var v struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	if json.Unmarshal(e.Payload, &v) == nil && len(v.Arguments) > 0 {
		return v.Arguments
	}
	return a
}

// hideRuns hides, in runs as who reads them, memory in their pending
// approvals, output and message (each a copy of the summary's).
func (s *Service) hideRuns(ctx context.Context, who *Caller, runs []api.Run) error {
	if who.admin() {
		return nil
	}
	for i := range runs {
		r := &runs[i]
		if r.Output == "" && r.Message == "" && len(r.Pending) == 0 {
			continue
		}
		m, err := s.heldMemory(ctx, r.ID, r.Events)
		if err != nil {
			return err
		}
		h := s.hidden(who, m)
		if x := h.at(m.seq); x != nil {
			r.Output, r.Message = x.text(r.Output), x.text(r.Message)
		}
		if len(r.Pending) > 0 && h != nil {
			r.Pending = slices.Clone(r.Pending)
			for j := range r.Pending {
				r.Pending[j].Arguments = h.args(r.Pending[j].Tool, r.Pending[j].Arguments)
			}
		}
	}
	return nil
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
