package service

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/realpath"
	"github.com/keel-run/keel/memory"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

// Memory across runs (docs/memory.md): list, show, edit and forget
// entries. A caller sees the scopes the runs it may create see: an admin
// (and the command line on the journal's machine) every scope; a token
// bound to agents those agents' own scopes (agent:NAME, and
// agent:NAME/user:TOKEN for its person), its person's (user:TOKEN), the
// projects under the server's workspace roots and the team's. Nothing
// else is visible, not even that an entry exists.

// memoryStore returns the service's memory store (one per service: it
// keeps the folded stream and catches up on each call).
func (s *Service) memoryStore() *memory.Store {
	s.memOnce.Do(func() { s.mem = memory.New(s.rt.Store(), &memory.Options{Clock: s.opts.Clock}) })
	return s.mem
}

// memoryState is the service's memory store, made on first use.
type memoryState struct {
	memOnce sync.Once
	mem     *memory.Store
	// held is what runs hold of memory, for the readers who may not
	// see all of it (memory_hide.go).
	heldOnce sync.Once
	held     *heldMemories
}

// MemoryScopes returns the memory scopes a run of the agent for the
// person onBehalfOf in workspace sees: what [Service.Prepare]'s runs are
// offered and what their memory tools read. The demo agent, which every
// token may run, has no memory: it would be a channel between tenants.
func MemoryScopes(principal, onBehalfOf, workspace string) (memory.Scopes, bool) {
	if principal == identity.DemoAgent {
		return memory.Scopes{}, false
	}
	return memory.Scopes{Agent: principal, User: onBehalfOf, Project: memory.ProjectID(workspace)}, true
}

// seesMemory reports whether who may see entries of scope sc.
func (s *Service) seesMemory(who *Caller, sc memory.Scope) bool {
	if who.admin() {
		return true
	}
	str := string(sc)
	switch sc.Kind() {
	case memory.KindTeam:
		return true
	case memory.KindAgent:
		return slices.Contains(who.Agents, strings.TrimPrefix(str, "agent:"))
	case memory.KindAgentUser:
		a, u, _ := strings.Cut(strings.TrimPrefix(str, "agent:"), "/user:")
		return slices.Contains(who.Agents, a) && u == who.Name
	case memory.KindUser:
		return strings.TrimPrefix(str, "user:") == who.Name
	case memory.KindProject:
		p := filepath.Clean(strings.TrimPrefix(str, "project:"))
		within := func(r string) bool { return realpath.Within(p, r) }
		return filepath.IsAbs(p) && (slices.ContainsFunc(s.conf.roots, within) || slices.ContainsFunc(s.conf.resolvedRoots, within))
	}
	return false
}

// MemoryParams selects what [Service.Memory] lists.
type MemoryParams = api.MemoryParams

// Memory lists the entries who may see, oldest first, each with the
// runs it was offered to and used by.
func (s *Service) Memory(ctx context.Context, who *Caller, p *MemoryParams) ([]api.MemoryEntry, error) {
	if p == nil {
		p = &MemoryParams{}
	}
	lp := &memory.ListParams{All: p.All}
	for _, sc := range p.Scopes {
		if err := memory.Scope(sc).Check(); err != nil {
			return nil, badRequest("%s", strings.TrimPrefix(err.Error(), "memory: "))
		}
		lp.Scopes = append(lp.Scopes, memory.Scope(sc))
	}
	list, err := s.memoryStore().List(ctx, lp)
	if err != nil {
		return nil, err
	}
	use, err := memory.Usage(ctx, s.rt.Store())
	if err != nil {
		return nil, err
	}
	out := []api.MemoryEntry{}
	for _, e := range list {
		if s.seesMemory(who, e.Scope) {
			out = append(out, memoryView(&e, use))
		}
	}
	return out, nil
}

// MemoryEntry returns every version of entry id (see
// [api.MemoryHistory]).
func (s *Service) MemoryEntry(ctx context.Context, who *Caller, id string) (api.MemoryHistory, error) {
	hist, err := s.memoryStore().History(ctx, id)
	if err == nil && !s.seesMemory(who, hist[0].Scope) {
		err = memory.ErrNotFound
	}
	if err != nil {
		return api.MemoryHistory{}, memoryErr(err, id)
	}
	use, err := memory.Usage(ctx, s.rt.Store())
	if err != nil {
		return api.MemoryHistory{}, err
	}
	h := api.MemoryHistory{}
	for _, e := range hist {
		h.Versions = append(h.Versions, memoryView(&e, use))
	}
	return h, nil
}

// EditMemory writes text as a new entry that supersedes entry id, with
// its scope and labels, by who.
func (s *Service) EditMemory(ctx context.Context, who *Caller, id, text string) (api.MemoryEntry, error) {
	if err := s.mayChangeMemory(ctx, who, id); err != nil {
		return api.MemoryEntry{}, err
	}
	e, err := s.memoryStore().Edit(ctx, id, text, who.Name)
	if err != nil {
		return api.MemoryEntry{}, memoryErr(err, id)
	}
	if err := s.record(ctx, who, action{Action: "memory.edit", Target: id, Detail: e.ID}); err != nil {
		return api.MemoryEntry{}, err
	}
	return memoryView(e, nil), nil
}

// ForgetMemory marks entry id forgotten by who: no later run is offered
// it nor finds it; it stays in the journal for audit.
func (s *Service) ForgetMemory(ctx context.Context, who *Caller, id, reason string) error {
	if err := s.mayChangeMemory(ctx, who, id); err != nil {
		return err
	}
	if e, err := s.memoryStore().Get(ctx, id); err == nil && e.Forgotten != nil {
		return conflict(api.CodeConflict, "memory entry %s was already forgotten (%s by %s)", visible.String(id), e.Forgotten.Time.UTC().Format(time.RFC3339), visible.String(e.Forgotten.By))
	}
	if err := s.memoryStore().Forget(ctx, id, who.Name, reason); err != nil {
		return memoryErr(err, id)
	}
	return s.record(ctx, who, action{Action: "memory.forget", Target: id, Detail: reason})
}

// mayChangeMemory checks that who sees entry id.
func (s *Service) mayChangeMemory(ctx context.Context, who *Caller, id string) error {
	e, err := s.memoryStore().Get(ctx, id)
	if err == nil && !s.seesMemory(who, e.Scope) {
		err = memory.ErrNotFound
	}
	return memoryErr(err, id)
}

// memoryErr turns the memory package's errors into the service's.
func memoryErr(err error, id string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, memory.ErrNotFound):
		return notFound("no memory entry %s", visible.String(id))
	case errors.Is(err, memory.ErrSuperseded):
		return conflict(api.CodeConflict, "memory entry %s was already superseded or forgotten: edit its newest version", visible.String(id))
	case errors.Is(err, memory.ErrInvalid):
		return badRequest("%s", strings.TrimPrefix(err.Error(), "memory: invalid entry: "))
	}
	return err
}

// memoryView is e as the API shows it, with its use.
func memoryView(e *memory.Entry, use map[string]*memory.Use) api.MemoryEntry {
	v := api.MemoryEntry{ID: e.ID, Scope: string(e.Scope), Text: e.Text,
		Labels:     api.MemoryLabels{Integrity: e.Labels.Integrity, Confidentiality: e.Labels.Confidentiality},
		Source:     api.MemorySource{Run: e.Source.Run, Call: e.Source.Call, Agent: e.Source.Agent, User: e.Source.User, By: e.Source.By},
		Supersedes: e.Supersedes, SupersededBy: e.SupersededBy, Written: e.Time.UTC(), Seq: e.Seq}
	if f := e.Forgotten; f != nil {
		v.Forgotten = &api.MemoryForgotten{By: f.By, Reason: f.Reason, Time: f.Time.UTC()}
	}
	if u := use[e.ID]; u != nil {
		v.OfferedRuns, v.UsedRuns = u.Offered, u.Used
	}
	return v
}
