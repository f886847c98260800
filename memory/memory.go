// Package memory keeps what agents and people remember across runs:
// entries of text per scope (an agent, an agent for a user, a user, a
// project, the team), each with its provenance (the run and call that
// wrote it, or the person), its information-flow labels and what it
// supersedes. Entries live in the journal as the system stream
// [StreamID], hash-chained and exported like runs; nothing is ever
// overwritten: an edit is a new entry that supersedes the old one, and a
// forgotten entry stays in the journal, marked, and is offered to no
// later run. A journal backend with a [journal.TextIndex] finds entries
// relevant to a task by full-text search.
//
// See docs/memory.md.
package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// StreamID is the system stream that holds every memory entry.
const StreamID = journal.SystemPrefix + "memory"

// Event types of the memory stream.
const (
	// Written adds an entry (possibly superseding an earlier one).
	Written journal.Type = "memory.written"
	// Forgotten marks an entry as no longer offered nor found.
	Forgotten journal.Type = "memory.forgotten"
)

// Labels of entries ([agent.MemoryLabels]).
const (
	Trusted   = "trusted"
	Untrusted = "untrusted"
	Public    = "public"
	Private   = "private"
)

// MaxText bounds an entry's text in bytes.
const MaxText = 8 << 10

// Errors callers branch on.
var (
	ErrNotFound = errors.New("memory: no such entry")
	// ErrSuperseded is returned for an edit or supersession of an entry
	// that another one already superseded, or that was forgotten.
	ErrSuperseded = errors.New("memory: the entry was already superseded or forgotten")
	ErrInvalid    = errors.New("memory: invalid entry")
)

// Source is an entry's provenance.
type Source struct {
	// Run and Call name the run and tool call that wrote the entry;
	// empty when a person did (By).
	Run  string `json:"run,omitempty"`
	Call string `json:"call,omitempty"`
	// Agent and User are the run's principal and the user it acted for.
	Agent string `json:"agent,omitempty"`
	User  string `json:"user,omitempty"`
	// By names the person who wrote or edited it (keel memory edit, the
	// API), or who imported it.
	By string `json:"by,omitempty"`
}

// Entry is one memory entry as folded from the stream.
type Entry struct {
	ID     string             `json:"id"`
	Scope  Scope              `json:"scope"`
	Text   string             `json:"text"`
	Labels agent.MemoryLabels `json:"labels"`
	Source Source             `json:"source"`
	// Supersedes names the entry this one replaces.
	Supersedes string `json:"supersedes,omitempty"`
	// Time and Seq are those of the memory.written event.
	Time time.Time `json:"time"`
	Seq  int64     `json:"seq"`
	// SupersededBy names the entry that replaced this one.
	SupersededBy string `json:"superseded_by,omitempty"`
	// Forgotten is set once the entry was forgotten.
	Forgotten *Forget `json:"forgotten,omitempty"`
}

// Current reports whether the entry is offered and found: neither
// superseded nor forgotten.
func (e *Entry) Current() bool { return e.SupersededBy == "" && e.Forgotten == nil }

// Forget records who forgot an entry, when and why.
type Forget struct {
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Time   time.Time `json:"time"`
	Seq    int64     `json:"seq"`
}

type writtenPayload struct {
	ID         string             `json:"id"`
	Scope      Scope              `json:"scope"`
	Text       string             `json:"text"`
	Labels     agent.MemoryLabels `json:"labels"`
	Source     Source             `json:"source"`
	Supersedes string             `json:"supersedes,omitempty"`
}

type forgottenPayload struct {
	ID     string `json:"id"`
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Options configures [New]. The zero value is valid.
type Options struct {
	// Clock gives event times; nil means time.Now.
	Clock journal.Clock
	// NewID returns a new entry id's random part; nil means a ULID.
	NewID func() string
}

// Store is the memory of one journal. It is safe for concurrent use, and
// several Stores (in several processes) may share a journal: each read
// catches up with the stream's newest events.
type Store struct {
	s     *journal.Stream
	ix    journal.TextIndex // nil: the backend has none
	newID func() string

	mu      sync.Mutex // guards the fields below; taken before the stream's lock
	entries map[string]*Entry
	order   []string // ids in stream order
	log     []indexOp
}

// indexOp is a change of the text index made by one event.
type indexOp struct {
	seq  int64
	id   string
	drop bool
}

// New returns the memory kept in store's [StreamID]. It reads nothing
// until first used.
func New(store journal.Store, opts *Options) *Store {
	m := &Store{entries: map[string]*Entry{}, newID: func() string { return strings.ToLower(ulid.Make().String()) }}
	var clock journal.Clock
	if opts != nil {
		clock = opts.Clock
		if opts.NewID != nil {
			m.newID = opts.NewID
		}
	}
	m.ix, _ = store.(journal.TextIndex)
	m.s = journal.NewStream(store, StreamID, clock, m.apply)
	return m
}

func (m *Store) apply(e *journal.Event) error {
	switch e.Type {
	case Written:
		var p writtenPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return fmt.Errorf("memory.written does not decode: %v", err)
		}
		if _, dup := m.entries[p.ID]; dup || p.ID == "" {
			return fmt.Errorf("memory entry %q written twice", p.ID)
		}
		if p.Supersedes != "" {
			old := m.entries[p.Supersedes]
			if old == nil || !old.Current() {
				return fmt.Errorf("memory entry %s supersedes %q, which is not current", p.ID, p.Supersedes)
			}
			old.SupersededBy = p.ID
			m.log = append(m.log, indexOp{seq: e.Seq, id: old.ID, drop: true})
		}
		m.entries[p.ID] = &Entry{ID: p.ID, Scope: p.Scope, Text: p.Text, Labels: p.Labels, Source: p.Source, Supersedes: p.Supersedes, Time: e.Time, Seq: e.Seq}
		m.order = append(m.order, p.ID)
		m.log = append(m.log, indexOp{seq: e.Seq, id: p.ID})
	case Forgotten:
		var p forgottenPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return fmt.Errorf("memory.forgotten does not decode: %v", err)
		}
		old := m.entries[p.ID]
		if old == nil {
			return fmt.Errorf("memory.forgotten of unknown entry %q", p.ID)
		}
		if old.Forgotten == nil {
			old.Forgotten = &Forget{By: p.By, Reason: p.Reason, Time: e.Time, Seq: e.Seq}
		}
		m.log = append(m.log, indexOp{seq: e.Seq, id: p.ID, drop: true})
	default:
		return fmt.Errorf("unknown event type %s in the memory stream", e.Type)
	}
	return nil
}

// sync catches up with the stream and brings the text index up to it.
// Callers hold m.mu.
func (m *Store) sync(ctx context.Context) error {
	if err := m.s.Sync(ctx); err != nil {
		return err
	}
	return m.reindex(ctx)
}

// reindex applies to the text index the changes of events newer than
// what it holds. The index is derived: a change another process already
// made, or makes meanwhile, is made again harmlessly, and searches check
// every key they return against the folded entries. Callers hold m.mu.
func (m *Store) reindex(ctx context.Context) error {
	if m.ix == nil || len(m.log) == 0 {
		return nil
	}
	up, err := m.ix.IndexedUpTo(ctx, StreamID)
	if err != nil {
		return err
	}
	i, _ := slices.BinarySearchFunc(m.log, up+1, func(o indexOp, seq int64) int { return int(o.seq - seq) })
	for _, o := range m.log[i:] {
		if o.drop {
			err = m.ix.UnindexText(ctx, StreamID, o.id)
		} else {
			e := m.entries[o.id]
			err = m.ix.IndexText(ctx, StreamID, o.id, e.Text, o.seq)
		}
		if err != nil {
			return err
		}
	}
	// Keep only what another process may still need redone: nothing
	// older than the index.
	m.log = m.log[:0]
	return nil
}

// WriteParams is a new entry.
type WriteParams struct {
	Scope  Scope
	Text   string
	Labels agent.MemoryLabels
	Source Source
	// Supersedes names a current entry of the same scope that the new
	// one replaces.
	Supersedes string
}

// Write journals a new entry and returns it. The text must be 1 to
// [MaxText] bytes of valid UTF-8; labels default to trusted and
// public.
func (m *Store) Write(ctx context.Context, p *WriteParams) (*Entry, error) {
	if err := p.Scope.Check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	text := strings.TrimSpace(p.Text)
	switch {
	case text == "":
		return nil, fmt.Errorf("%w: the text is empty", ErrInvalid)
	case len(text) > MaxText:
		return nil, fmt.Errorf("%w: the text has %d bytes, more than %d", ErrInvalid, len(text), MaxText)
	case !utf8.ValidString(text):
		return nil, fmt.Errorf("%w: the text is not valid UTF-8", ErrInvalid)
	}
	l := p.Labels
	if l.Integrity == "" {
		l.Integrity = Trusted
	}
	if l.Confidentiality == "" {
		l.Confidentiality = Public
	}
	if (l.Integrity != Trusted && l.Integrity != Untrusted) || (l.Confidentiality != Public && l.Confidentiality != Private) {
		return nil, fmt.Errorf("%w: labels %+v: want integrity trusted|untrusted, confidentiality public|private", ErrInvalid, l)
	}
	id := "mem_" + m.newID()
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.s.Append(ctx, Written, &writtenPayload{ID: id, Scope: p.Scope, Text: text, Labels: l, Source: p.Source, Supersedes: p.Supersedes}, func() error {
		if p.Supersedes == "" {
			return nil
		}
		old := m.entries[p.Supersedes]
		switch {
		case old == nil:
			return fmt.Errorf("%w: %s", ErrNotFound, p.Supersedes)
		case !old.Current():
			return fmt.Errorf("%w: %s", ErrSuperseded, p.Supersedes)
		case old.Scope != p.Scope:
			return fmt.Errorf("%w: %s is in scope %s, not %s", ErrInvalid, p.Supersedes, old.Scope, p.Scope)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := m.reindex(ctx); err != nil {
		return nil, err
	}
	e := *m.entries[id]
	return &e, nil
}

// Edit writes text as a new entry that supersedes id, with id's scope
// and labels, by a person.
func (m *Store) Edit(ctx context.Context, id, text, by string) (*Entry, error) {
	old, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	src := Source{By: by}
	return m.Write(ctx, &WriteParams{Scope: old.Scope, Text: text, Labels: old.Labels, Source: src, Supersedes: id})
}

// Forget marks the entry (and, so that no older version comes back,
// nothing else: older versions were already superseded) as forgotten.
// Forgetting a forgotten entry is not an error.
func (m *Store) Forget(ctx context.Context, id, by, reason string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	done := false
	_, err := m.s.Append(ctx, Forgotten, &forgottenPayload{ID: id, By: by, Reason: reason}, func() error {
		e := m.entries[id]
		if e == nil {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		if e.Forgotten != nil {
			done = true
			return errDone
		}
		return nil
	})
	if done {
		return nil
	}
	if err != nil {
		return err
	}
	return m.reindex(ctx)
}

var errDone = errors.New("memory: nothing to do")

// Get returns the entry id, current or not.
func (m *Store) Get(ctx context.Context, id string) (*Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.sync(ctx); err != nil {
		return nil, err
	}
	e := m.entries[id]
	if e == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	c := *e
	return &c, nil
}

// History returns the versions of id's entry, oldest first: the entries
// it superseded and those that superseded it.
func (m *Store) History(ctx context.Context, id string) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.sync(ctx); err != nil {
		return nil, err
	}
	e := m.entries[id]
	if e == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	for e.Supersedes != "" && m.entries[e.Supersedes] != nil {
		e = m.entries[e.Supersedes]
	}
	var out []Entry
	for e != nil {
		out = append(out, *e)
		e = m.entries[e.SupersededBy]
	}
	return out, nil
}

// ListParams filters [Store.List].
type ListParams struct {
	// Scopes, when non-empty, keeps entries of these scopes only.
	Scopes []Scope
	// All includes superseded and forgotten entries.
	All bool
}

// List returns entries, oldest first.
func (m *Store) List(ctx context.Context, p *ListParams) ([]Entry, error) {
	if p == nil {
		p = &ListParams{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.sync(ctx); err != nil {
		return nil, err
	}
	var out []Entry
	for _, id := range m.order {
		e := m.entries[id]
		if (p.All || e.Current()) && (len(p.Scopes) == 0 || slices.Contains(p.Scopes, e.Scope)) {
			out = append(out, *e)
		}
	}
	return out, nil
}

// Search returns up to limit current entries of scopes that match query,
// best first: by the journal's full-text index when the backend has one,
// else by the number of query terms an entry's words hold.
func (m *Store) Search(ctx context.Context, scopes []Scope, query string, limit int) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.sync(ctx); err != nil {
		return nil, err
	}
	return m.searchLocked(ctx, scopes, query, limit)
}

func (m *Store) searchLocked(ctx context.Context, scopes []Scope, query string, limit int) ([]Entry, error) {
	keep := func(e *Entry) bool { return e != nil && e.Current() && slices.Contains(scopes, e.Scope) }
	var out []Entry
	if m.ix != nil {
		// The index spans every scope: ask for more than limit so that
		// other scopes' entries do not crowd out these.
		keys, err := m.ix.SearchText(ctx, StreamID, query, max(limit*8, 64))
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if e := m.entries[k]; keep(e) && len(out) < limit {
				out = append(out, *e)
			}
		}
		return out, nil
	}
	terms := journal.SearchTerms(query)
	type scored struct {
		e *Entry
		n int
	}
	var hits []scored
	for _, id := range m.order {
		e := m.entries[id]
		if !keep(e) {
			continue
		}
		words := journal.SearchWords(e.Text)
		n := 0
		for _, t := range terms {
			if slices.Contains(words, t) {
				n++
			}
		}
		if n > 0 {
			hits = append(hits, scored{e, n})
		}
	}
	slices.SortStableFunc(hits, func(a, b scored) int { return b.n - a.n })
	for _, h := range hits[:min(limit, len(hits))] {
		out = append(out, *h.e)
	}
	return out, nil
}
