// Package token is the set of API tokens of the team server: secrets
// shown once and stored as SHA-256 digests, scopes, the agents a token's
// runs may act as, and revocation. Tokens live in the journal as the
// system stream [StreamID], so every process on one journal (keel serve
// and keel tokens) shares them.
package token

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

// StreamID is the system stream that holds the tokens.
const StreamID = journal.SystemPrefix + "tokens"

// Event types of the token stream.
const (
	Created journal.Type = "token.created"
	Revoked journal.Type = "token.revoked"
)

// Token errors.
var (
	// ErrBad is returned for a token that is malformed, unknown or
	// revoked.
	ErrBad = errors.New("token: invalid or revoked API token")
	// ErrNotFound is returned when revoking an unknown token id.
	ErrNotFound = errors.New("token: no such token")
	// ErrRevoked is returned when revoking a revoked token again.
	ErrRevoked = errors.New("token: revoked already")
)

// Scopes lists every token scope, in the order they are documented.
var Scopes = []string{api.ScopeRunsRead, api.ScopeRunsWrite, api.ScopeApprovalsWrite, api.ScopeMetricsRead, api.ScopeAdmin}

// Prefix starts every API token secret: "keel_" + id + "_" + secret.
const Prefix = "keel_"

// Set is the set of API tokens. They live in the journal as the system
// stream [StreamID] (token.created, token.revoked), so they survive
// restarts, are shared by every process that opens the same journal (the
// CLI's `keel tokens create` and a running server), and are hash-chained
// like runs. Only a SHA-256 digest of each secret is stored: a token is
// 160 random bits, so a fast hash is enough (there is nothing to
// brute-force as with passwords).
//
// A Set is safe for concurrent use. Tokens created or revoked by another
// process are seen within [Options.Refresh].
type Set struct {
	s       *journal.Stream
	refresh time.Duration
	clock   journal.Clock

	mu      sync.RWMutex
	byID    map[string]*tokenRec
	checked time.Time // last refresh from the store
	// revoked is closed (and replaced) whenever a revocation is folded,
	// so that open event streams end at once.
	revoked chan struct{}
	// refreshing serialises refreshIfStale's reads of the stream.
	refreshing sync.Mutex
}

type tokenRec struct {
	api.Token
	hash      string // hex SHA-256 of the whole token string
	revokedBy string
}

// Options configures [New]. The zero value is valid.
type Options struct {
	// Clock gives event times; nil means time.Now.
	Clock journal.Clock
	// Refresh is how stale the in-memory view may be before a request
	// re-reads the stream (to see tokens revoked by another process);
	// 0 means one second.
	Refresh time.Duration
}

// tokenCreated and tokenRevoked are the payloads of the token stream.
type tokenCreated struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	Scopes    []string `json:"scopes"`
	Agents    []string `json:"agents,omitempty"`
	Hash      string   `json:"sha256"`
	CreatedBy string   `json:"created_by,omitempty"`
}

type tokenRevoked struct {
	ID string `json:"id"`
	By string `json:"by,omitempty"`
}

// New returns the token set kept in store's [StreamID]. It reads nothing
// until first used.
func New(store journal.Store, opts *Options) *Set {
	t := &Set{byID: map[string]*tokenRec{}, refresh: time.Second, clock: time.Now, revoked: make(chan struct{})}
	if opts != nil {
		if opts.Clock != nil {
			t.clock = opts.Clock
		}
		if opts.Refresh > 0 {
			t.refresh = opts.Refresh
		}
	}
	t.s = journal.NewStream(store, StreamID, t.clock, t.apply)
	return t
}

// apply folds one token event (called with the stream's lock held).
func (t *Set) apply(e *journal.Event) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e.Type {
	case Created:
		var p tokenCreated
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		t.byID[p.ID] = &tokenRec{Token: api.Token{ID: p.ID, Name: p.Name, Scopes: p.Scopes, Agents: p.Agents, CreatedBy: p.CreatedBy, Created: e.Time}, hash: p.Hash}
	case Revoked:
		var p tokenRevoked
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		if r := t.byID[p.ID]; r != nil && r.Revoked == nil {
			// The first revocation is the one that counts (an older
			// journal may hold a repeat).
			tm := e.Time
			r.Revoked, r.revokedBy = &tm, p.By
		}
		close(t.revoked)
		t.revoked = make(chan struct{})
	}
	return nil
}

// CheckScopes returns an error naming the first scope that is not one of
// [Scopes], or nil; an empty list is an error too.
func CheckScopes(scopes []string) error {
	if len(scopes) == 0 {
		return fmt.Errorf("token: a token needs at least one scope (%s)", strings.Join(Scopes, ", "))
	}
	for _, s := range scopes {
		if !slices.Contains(Scopes, s) {
			return fmt.Errorf("token: unknown scope %q (want %s)", s, strings.Join(Scopes, ", "))
		}
	}
	return nil
}

// CheckName returns an error unless name may name a token's person
// or system: 1 to 100 characters, none of them a control character or an
// invisible or reordering one (see [visible.String]), and not starting with
// "keel." or "keel-" or "_keel" (whatever the case), which name Keel's
// own principals (keel.timeout, keel-cli, keel serve...): a person's
// decision must never look automatic. The check sees through look-alikes:
// the name is compared in its Unicode compatibility form (NFKC, so a
// fullwidth "Ｋeel." is "Keel."), and a name whose first five characters
// mix Latin letters with letters of another script (a Cyrillic "е" in
// "kеel.timeout") is refused too.
func CheckName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return errors.New("token: a token needs a name (the person or system using it)")
	case utf8.RuneCountInString(name) > 100:
		return errors.New("token: a token's name has at most 100 characters")
	case !utf8.ValidString(name) || visible.String(name) != name || strings.ContainsAny(name, "\n\t"):
		return fmt.Errorf("token: token name %q contains control or invisible characters", visible.String(name))
	}
	l := strings.ToLower(norm.NFKC.String(name))
	if mixedScripts(l, 5) {
		return fmt.Errorf("token: token name %q mixes Latin letters with letters of another script in its first characters (a look-alike); write it in one script", name)
	}
	if identity.KeelsOwn(l) {
		return fmt.Errorf("token: token name %q looks like one of Keel's own principals (keel.*, keel-*); name the person or system", name)
	}
	return nil
}

// mixedScripts reports whether the first n characters of s hold Latin
// letters and letters of another script (characters of no script, such
// as digits, punctuation and combining marks, do not count).
func mixedScripts(s string, n int) bool {
	latin, other := false, false
	for i, r := range []rune(s) {
		if i == n {
			break
		}
		switch {
		case !unicode.IsLetter(r):
		case unicode.Is(unicode.Latin, r):
			latin = true
		default:
			other = true
		}
	}
	return latin && other
}

// Params describe a new token for [Set.Create].
type Params struct {
	// Name is the person or system the token is for (see
	// [CheckName]); it is recorded with every action taken with it.
	Name string
	// Scopes must be among [Scopes] (at least one).
	Scopes []string
	// Agents are the agents the token's runs may act as (checked by the
	// caller against the agent directory); admin tokens may act as any.
	Agents []string
	// By names who creates the token.
	By string
}

// Create makes a token and returns it with its secret, which is not
// stored and cannot be shown again. It returns an error for a name that
// [CheckName] refuses, scopes that [CheckScopes] refuses, or an
// agent name that is not valid (identity.CheckName).
func (t *Set) Create(ctx context.Context, p *Params) (*api.NewToken, error) {
	name := strings.TrimSpace(p.Name)
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if err := CheckScopes(p.Scopes); err != nil {
		return nil, err
	}
	var agents []string
	for _, a := range p.Agents {
		if err := identity.CheckName(a); err != nil {
			return nil, fmt.Errorf("token: token agent: %w", err)
		}
		if !slices.Contains(agents, a) {
			agents = append(agents, a)
		}
	}
	id, err := Random(8)
	if err != nil {
		return nil, err
	}
	secretPart, err := Random(20)
	if err != nil {
		return nil, err
	}
	secret := Prefix + id + "_" + secretPart
	tc := tokenCreated{ID: id, Name: name, Scopes: slices.Clone(p.Scopes), Agents: agents, Hash: digest(secret), CreatedBy: p.By}
	_, err = t.s.Append(ctx, Created, &tc, func() error {
		t.mu.RLock()
		defer t.mu.RUnlock()
		if t.byID[id] != nil {
			return fmt.Errorf("token: token id %s already exists; try again", id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	t.mu.RLock()
	tok := t.byID[id].Token
	t.mu.RUnlock()
	return &api.NewToken{Token: tok, Secret: secret}, nil
}

// Revoke revokes token id, recording by as the person who did it. It
// returns [ErrNotFound] for an unknown id, and for a revoked one an
// error wrapping [ErrRevoked] that says when and by whom: the first
// revocation's time is kept, since it bounds what the token could do.
func (t *Set) Revoke(ctx context.Context, id, by string) error {
	_, err := t.s.Append(ctx, Revoked, &tokenRevoked{ID: id, By: by}, func() error {
		t.mu.RLock()
		defer t.mu.RUnlock()
		r := t.byID[id]
		switch {
		case r == nil:
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		case r.Revoked != nil:
			who := r.revokedBy
			if who == "" {
				who = "someone"
			}
			return fmt.Errorf("%w: token %s is revoked already (since %s, by %s)", ErrRevoked, id, r.Revoked.UTC().Format("2006-01-02 15:04:05 UTC"), visible.String(who))
		}
		return nil
	})
	return err
}

// List returns every token (revoked ones included), oldest first.
func (t *Set) List(ctx context.Context) ([]api.Token, error) {
	if err := t.s.Sync(ctx); err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]api.Token, 0, len(t.byID))
	for _, r := range t.byID {
		tok := r.Token
		tok.Scopes, tok.Agents = slices.Clone(r.Scopes), slices.Clone(r.Agents)
		out = append(out, tok)
	}
	slices.SortFunc(out, func(a, b api.Token) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Authenticate returns the token whose secret is secret, or an error
// wrapping [ErrBad]. It re-reads the stream when its view is older
// than the refresh interval or the token id is unknown, so a token made
// or revoked by another process takes effect within that interval.
func (t *Set) Authenticate(ctx context.Context, secret string) (*api.Token, error) {
	rest, ok := strings.CutPrefix(secret, Prefix)
	id, _, ok2 := strings.Cut(rest, "_")
	if !ok || !ok2 || id == "" {
		return nil, ErrBad
	}
	t.mu.RLock()
	r, stale := t.byID[id], t.clock().Sub(t.checked) > t.refresh
	t.mu.RUnlock()
	if r == nil || stale {
		if err := t.s.Sync(ctx); err != nil {
			return nil, err
		}
		t.mu.Lock()
		t.checked = t.clock()
		r = t.byID[id]
		t.mu.Unlock()
	}
	if r == nil {
		return nil, ErrBad
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if subtle.ConstantTimeCompare([]byte(r.hash), []byte(digest(secret))) != 1 || r.Revoked != nil {
		return nil, ErrBad
	}
	tok := r.Token
	tok.Scopes, tok.Agents = slices.Clone(r.Scopes), slices.Clone(r.Agents)
	return &tok, nil
}

// Active returns nil if token id exists and is not revoked, re-reading
// the stream when its view is older than the refresh interval (so a
// revocation by another process is seen within it), and an error
// wrapping [ErrBad] otherwise. Open event streams call it on a short
// tick and before each batch of events, so a revoked token stops
// receiving events as its other requests stop working.
func (t *Set) Active(ctx context.Context, id string) error {
	if err := t.refreshIfStale(ctx); err != nil {
		return err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if r := t.byID[id]; r == nil || r.Revoked != nil {
		return ErrBad
	}
	return nil
}

// refreshIfStale re-reads the stream when the view is older than the
// refresh interval, once for all the callers that find it stale at the
// same time (every open event stream checks its token every second).
func (t *Set) refreshIfStale(ctx context.Context) error {
	stale := func() bool {
		t.mu.RLock()
		defer t.mu.RUnlock()
		return t.clock().Sub(t.checked) > t.refresh
	}
	if !stale() {
		return nil
	}
	t.refreshing.Lock()
	defer t.refreshing.Unlock()
	if !stale() {
		return nil // another caller refreshed meanwhile
	}
	if err := t.s.Sync(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	t.checked = t.clock()
	t.mu.Unlock()
	return nil
}

// Revocations returns a channel that is closed at the next revocation
// this Set folds (made here, or read from the stream), so that open
// event streams can end at once.
func (t *Set) Revocations() <-chan struct{} {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.revoked
}

// Count returns the number of tokens that are not revoked.
func (t *Set) Count(ctx context.Context) (int, error) {
	if err := t.s.Sync(ctx); err != nil {
		return 0, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := 0
	for _, r := range t.byID {
		if r.Revoked == nil {
			n++
		}
	}
	return n, nil
}

// HasScope reports whether tok grants scope: admin grants every scope,
// and runs:write and approvals:write include runs:read (see package api).
func HasScope(tok *api.Token, scope string) bool {
	if slices.Contains(tok.Scopes, api.ScopeAdmin) || slices.Contains(tok.Scopes, scope) {
		return true
	}
	return scope == api.ScopeRunsRead && (slices.Contains(tok.Scopes, api.ScopeRunsWrite) || slices.Contains(tok.Scopes, api.ScopeApprovalsWrite))
}

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Random returns n random bytes as lowercase base32: the id and secret
// of a token, and other one-time secrets (the server's sign-in codes).
func Random(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("token: random: %w", err)
	}
	return b32.EncodeToString(b), nil
}
