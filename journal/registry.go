package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/keel-run/keel/redact"
)

// Opener opens the [Store] named by a DSN of its scheme. It receives the
// whole DSN, scheme included (or a bare path for the default scheme), so
// that it can parse forms such as "postgres://user@host/db".
type Opener func(ctx context.Context, dsn string) (Store, error)

// DefaultScheme is the scheme of a DSN that has none: a bare file path
// names a SQLite journal.
const DefaultScheme = "sqlite"

// ErrUnknownScheme is returned (wrapped) by [Open] for a DSN whose scheme
// has no registered backend.
var ErrUnknownScheme = errors.New("journal: unknown store scheme")

var registry struct {
	sync.Mutex
	openers map[string]Opener
}

// Register makes a backend available to [Open] under scheme, in the manner
// of tailscale's ipn/store registry: backend packages call it from init,
// and a program links the backends it wants by importing them. scheme must
// be a lowercase URI scheme of at least two characters ("sqlite",
// "postgres"); a one-letter scheme would be mistaken for a Windows drive.
// Register panics on an invalid scheme, a nil open, or a scheme registered
// twice: all are programming errors.
func Register(scheme string, open Opener) {
	if !validScheme(scheme) || scheme != strings.ToLower(scheme) {
		panic(fmt.Sprintf("journal: Register: invalid scheme %q", scheme))
	}
	if open == nil {
		panic(fmt.Sprintf("journal: Register %q: nil opener", scheme))
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.openers[scheme]; dup {
		panic(fmt.Sprintf("journal: Register: scheme %q registered twice", scheme))
	}
	if registry.openers == nil {
		registry.openers = make(map[string]Opener)
	}
	registry.openers[scheme] = open
}

// Schemes returns the registered schemes, sorted.
func Schemes() []string {
	registry.Lock()
	defer registry.Unlock()
	out := make([]string, 0, len(registry.openers))
	for s := range registry.openers {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Open opens the journal named by dsn with the backend registered for its
// scheme, the text before the first ":" when that is a valid URI scheme of
// two or more characters (compared case-insensitively). A dsn without one,
// such as "/var/lib/keel/journal.db" or "keel.db", uses [DefaultScheme]
// and is passed to its opener unchanged; a path that looks like a scheme
// ("a:b.db" in the working directory) must be written with the scheme,
// "sqlite:a:b.db". The backend must have been linked in by importing its
// package (for SQLite, github.com/keel-run/keel/journal/sqlite). Open
// returns an error wrapping [ErrUnknownScheme] for an unregistered scheme,
// or the backend's error.
func Open(ctx context.Context, dsn string) (Store, error) {
	if dsn == "" {
		return nil, errors.New("journal: open: empty dsn")
	}
	scheme := DefaultScheme
	if s, _, ok := strings.Cut(dsn, ":"); ok && validScheme(s) {
		scheme = strings.ToLower(s)
	}
	registry.Lock()
	open := registry.openers[scheme]
	registry.Unlock()
	if open == nil {
		return nil, fmt.Errorf("journal: open %q: %w %q (registered: %s; is its package imported?)",
			redact.DSN(dsn), ErrUnknownScheme, scheme, strings.Join(Schemes(), ", "))
	}
	return open(ctx, dsn)
}

// validScheme reports whether s is an RFC 3986 scheme (a letter, then
// letters, digits, "+", "-" or ".") of at least two characters.
func validScheme(s string) bool {
	if len(s) < 2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}
