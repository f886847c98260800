package journal

import (
	"context"
	"time"
)

// Record is one row of a store's side table of mutable records
// ([Records]).
type Record struct {
	// Kind groups records ("vault.grant", "vault.provider"); Key is unique
	// within a kind.
	Kind, Key string
	// Value is opaque bytes, stored as given.
	Value []byte
	// Version is 1 after the record's first Put and grows by one with
	// each Put; compare-and-swap writes name the version they replace.
	Version int64
	// Updated is when the newest Put was stored (the store's clock).
	Updated time.Time
}

// Records is an optional interface of a [Store]: a small table of
// mutable, versioned records kept in the same database as the events but
// never in an event. It exists for state that must not be journaled
// as-is, such as encrypted credentials (package credential), whose
// changes are journaled as events that carry ids and hashes only.
//
// Writes are compare-and-swap on Version, so several processes sharing
// the database update one record without lost updates, and a record can
// serve as a lease (write an owner and an expiry into it; whoever's Put
// succeeds holds it). Implementations are safe for concurrent use.
type Records interface {
	// GetRecord returns the record, or an error wrapping [ErrNotFound].
	GetRecord(ctx context.Context, kind, key string) (*Record, error)
	// PutRecord stores value if the record's current version is
	// ifVersion (0: the record must not exist) and returns the new
	// version; otherwise it stores nothing and returns an error wrapping
	// [ErrConflict].
	PutRecord(ctx context.Context, kind, key string, value []byte, ifVersion int64) (int64, error)
	// DeleteRecord removes the record if its version is ifVersion, and
	// otherwise returns an error wrapping [ErrConflict] ([ErrNotFound]
	// when it does not exist).
	DeleteRecord(ctx context.Context, kind, key string, ifVersion int64) error
	// ListRecords returns every record of kind, sorted by key.
	ListRecords(ctx context.Context, kind string) ([]Record, error)
}
