package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Directory is a system stream that lists named things, each kept in a
// stream of its own (schedules, triggers): events of type Created carry
// {"id", "name", "by"} and events of type Deleted {"id", "by"}. Names are
// unique among the things not deleted; a deleted thing's name may be
// taken again. A Directory is safe for concurrent use; several processes
// may share one (see [Stream]).
type Directory struct {
	s                *Stream
	created, deleted Type

	mu    sync.Mutex
	names map[string]string // live name → id
	ids   []string          // live ids, in creation order
}

// DirEntry is the payload of a directory's events.
type DirEntry struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	By   string `json:"by,omitempty"`
}

// ErrNameTaken is returned by [Directory.Add] for a name in use.
var ErrNameTaken = errors.New("journal: the name is taken")

// NewDirectory returns the directory kept in stream id of store, whose
// events have types created and deleted. It reads nothing.
func NewDirectory(store Store, id string, clock Clock, created, deleted Type) *Directory {
	d := &Directory{created: created, deleted: deleted, names: map[string]string{}}
	d.s = NewStream(store, id, clock, d.apply)
	return d
}

func (d *Directory) apply(e *Event) error {
	var p DirEntry
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch e.Type {
	case d.created:
		d.names[p.Name] = p.ID
		d.ids = append(d.ids, p.ID)
	case d.deleted:
		for n, id := range d.names {
			if id == p.ID {
				delete(d.names, n)
			}
		}
		d.ids = slices.DeleteFunc(d.ids, func(id string) bool { return id == p.ID })
	default:
		return fmt.Errorf("unknown event type %s", e.Type)
	}
	return nil
}

// Sync catches up with the stream.
func (d *Directory) Sync(ctx context.Context) error { return d.s.Sync(ctx) }

// Resolve returns the id of the thing named or identified by ref (not
// synced: call [Directory.Sync] first), and whether it is listed.
func (d *Directory) Resolve(ref string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if id, ok := d.names[ref]; ok {
		return id, true
	}
	return ref, slices.Contains(d.ids, ref)
}

// IDs returns the ids listed, in creation order (synced first).
func (d *Directory) IDs(ctx context.Context) ([]string, error) {
	if err := d.s.Sync(ctx); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ids), nil
}

// Taken returns an error wrapping [ErrNameTaken] when name is in use
// (synced first).
func (d *Directory) Taken(ctx context.Context, name string) error {
	if err := d.s.Sync(ctx); err != nil {
		return err
	}
	return d.taken(name)
}

func (d *Directory) taken(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.names[name]; ok {
		return fmt.Errorf("%w: %q", ErrNameTaken, name)
	}
	return nil
}

// Add lists a thing, unless its name was taken meanwhile (an error
// wrapping [ErrNameTaken]).
func (d *Directory) Add(ctx context.Context, id, name, by string) error {
	_, err := d.s.Append(ctx, d.created, &DirEntry{ID: id, Name: name, By: by}, func() error { return d.taken(name) })
	return err
}

// errGone stops a removal of a thing no longer listed.
var errGone = errors.New("journal: not listed")

// Remove unlists a thing; removing one no longer listed does nothing.
func (d *Directory) Remove(ctx context.Context, id, by string) error {
	_, err := d.s.Append(ctx, d.deleted, &DirEntry{ID: id, By: by}, func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if !slices.Contains(d.ids, id) {
			return errGone
		}
		return nil
	})
	if errors.Is(err, errGone) {
		return nil
	}
	return err
}
