package server

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
)

// Token errors.
var (
	// ErrBadToken is returned for a token that is malformed, unknown or
	// revoked.
	ErrBadToken = errors.New("server: invalid or revoked API token")
	// ErrTokenNotFound is returned when revoking an unknown token id.
	ErrTokenNotFound = errors.New("server: no such token")
)

// Scopes lists every token scope, in the order they are documented.
var Scopes = []string{api.ScopeRunsRead, api.ScopeRunsWrite, api.ScopeApprovalsWrite, api.ScopeAdmin}

// TokenPrefix starts every API token secret: "keel_" + id + "_" + secret.
const TokenPrefix = "keel_"

// Tokens is the set of API tokens. They live in the journal as the system
// stream [TokenStream] (token.created, token.revoked), so they survive
// restarts, are shared by every process that opens the same journal (the
// CLI's `keel tokens create` and a running server), and are hash-chained
// like runs. Only a SHA-256 digest of each secret is stored: a token is
// 160 random bits, so a fast hash is enough (there is nothing to
// brute-force as with passwords).
//
// A Tokens is safe for concurrent use. Tokens created or revoked by
// another process are seen within [TokensOptions.Refresh].
type Tokens struct {
	s       *stream
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
	hash string // hex SHA-256 of the whole token string
}

// TokensOptions configures [NewTokens]. The zero value is valid.
type TokensOptions struct {
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

// NewTokens returns the token set kept in store's [TokenStream]. It reads
// nothing until first used.
func NewTokens(store journal.Store, opts *TokensOptions) *Tokens {
	t := &Tokens{byID: map[string]*tokenRec{}, refresh: time.Second, clock: time.Now, revoked: make(chan struct{})}
	if opts != nil {
		if opts.Clock != nil {
			t.clock = opts.Clock
		}
		if opts.Refresh > 0 {
			t.refresh = opts.Refresh
		}
	}
	t.s = &stream{store: store, id: TokenStream, clock: t.clock, apply: t.apply}
	return t
}

// apply folds one token event (called with the stream's lock held).
func (t *Tokens) apply(e *journal.Event) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e.Type {
	case TokenCreated:
		var p tokenCreated
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		t.byID[p.ID] = &tokenRec{Token: api.Token{ID: p.ID, Name: p.Name, Scopes: p.Scopes, Agents: p.Agents, CreatedBy: p.CreatedBy, Created: e.Time}, hash: p.Hash}
	case TokenRevoked:
		var p tokenRevoked
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		if r := t.byID[p.ID]; r != nil {
			tm := e.Time
			r.Revoked = &tm
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
		return fmt.Errorf("server: a token needs at least one scope (%s)", strings.Join(Scopes, ", "))
	}
	for _, s := range scopes {
		if !slices.Contains(Scopes, s) {
			return fmt.Errorf("server: unknown scope %q (want %s)", s, strings.Join(Scopes, ", "))
		}
	}
	return nil
}

// CheckTokenName returns an error unless name may name a token's person
// or system: 1 to 100 characters, none of them a control character or an
// invisible or reordering one (see [Visible]), and not starting with
// "keel." or "keel-" or "_keel" (whatever the case), which name Keel's
// own principals (keel.timeout, keel-cli, keel serve...): a person's
// decision must never look automatic. The check sees through look-alikes:
// the name is compared in its Unicode compatibility form (NFKC, so a
// fullwidth "Ｋeel." is "Keel."), and a name whose first five characters
// mix Latin letters with letters of another script (a Cyrillic "е" in
// "kеel.timeout") is refused too.
func CheckTokenName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return errors.New("server: a token needs a name (the person or system using it)")
	case utf8.RuneCountInString(name) > 100:
		return errors.New("server: a token's name has at most 100 characters")
	case !utf8.ValidString(name) || Visible(name) != name || strings.ContainsAny(name, "\n\t"):
		return fmt.Errorf("server: token name %q contains control or invisible characters", Visible(name))
	}
	l := strings.ToLower(norm.NFKC.String(name))
	if mixedScripts(l, 5) {
		return fmt.Errorf("server: token name %q mixes Latin letters with letters of another script in its first characters (a look-alike); write it in one script", name)
	}
	if l == "keel" || strings.HasPrefix(l, "keel.") || strings.HasPrefix(l, "keel-") || strings.HasPrefix(l, "keel ") || strings.HasPrefix(l, "_keel") {
		return fmt.Errorf("server: token name %q looks like one of Keel's own principals (keel.*, keel-*); name the person or system", name)
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

// TokenParams describe a new token for [Tokens.Create].
type TokenParams struct {
	// Name is the person or system the token is for (see
	// [CheckTokenName]); it is recorded with every action taken with it.
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
// [CheckTokenName] refuses, scopes that [CheckScopes] refuses, or an
// agent name that is not valid (identity.CheckName).
func (t *Tokens) Create(ctx context.Context, p *TokenParams) (*api.NewToken, error) {
	name := strings.TrimSpace(p.Name)
	if err := CheckTokenName(name); err != nil {
		return nil, err
	}
	if err := CheckScopes(p.Scopes); err != nil {
		return nil, err
	}
	var agents []string
	for _, a := range p.Agents {
		if err := identity.CheckName(a); err != nil {
			return nil, fmt.Errorf("server: token agent: %w", err)
		}
		if !slices.Contains(agents, a) {
			agents = append(agents, a)
		}
	}
	id, err := randomString(8)
	if err != nil {
		return nil, err
	}
	secretPart, err := randomString(20)
	if err != nil {
		return nil, err
	}
	secret := TokenPrefix + id + "_" + secretPart
	tc := tokenCreated{ID: id, Name: name, Scopes: slices.Clone(p.Scopes), Agents: agents, Hash: digest(secret), CreatedBy: p.By}
	_, err = t.s.append(ctx, TokenCreated, &tc, func() error {
		t.mu.RLock()
		defer t.mu.RUnlock()
		if t.byID[id] != nil {
			return fmt.Errorf("server: token id %s already exists; try again", id)
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
// returns [ErrTokenNotFound] for an unknown id; revoking twice is not an
// error.
func (t *Tokens) Revoke(ctx context.Context, id, by string) error {
	_, err := t.s.append(ctx, TokenRevoked, &tokenRevoked{ID: id, By: by}, func() error {
		t.mu.RLock()
		defer t.mu.RUnlock()
		if t.byID[id] == nil {
			return fmt.Errorf("%w: %s", ErrTokenNotFound, id)
		}
		return nil
	})
	return err
}

// List returns every token (revoked ones included), oldest first.
func (t *Tokens) List(ctx context.Context) ([]api.Token, error) {
	if err := t.s.refresh(ctx); err != nil {
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
// wrapping [ErrBadToken]. It re-reads the stream when its view is older
// than the refresh interval or the token id is unknown, so a token made
// or revoked by another process takes effect within that interval.
func (t *Tokens) Authenticate(ctx context.Context, secret string) (*api.Token, error) {
	rest, ok := strings.CutPrefix(secret, TokenPrefix)
	id, _, ok2 := strings.Cut(rest, "_")
	if !ok || !ok2 || id == "" {
		return nil, ErrBadToken
	}
	t.mu.RLock()
	r, stale := t.byID[id], t.clock().Sub(t.checked) > t.refresh
	t.mu.RUnlock()
	if r == nil || stale {
		if err := t.s.refresh(ctx); err != nil {
			return nil, err
		}
		t.mu.Lock()
		t.checked = t.clock()
		r = t.byID[id]
		t.mu.Unlock()
	}
	if r == nil {
		return nil, ErrBadToken
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if subtle.ConstantTimeCompare([]byte(r.hash), []byte(digest(secret))) != 1 || r.Revoked != nil {
		return nil, ErrBadToken
	}
	tok := r.Token
	tok.Scopes, tok.Agents = slices.Clone(r.Scopes), slices.Clone(r.Agents)
	return &tok, nil
}

// Active returns nil if token id exists and is not revoked, re-reading
// the stream when its view is older than the refresh interval (so a
// revocation by another process is seen within it), and an error
// wrapping [ErrBadToken] otherwise. Open event streams call it on a short
// tick and before each batch of events, so a revoked token stops
// receiving events as its other requests stop working.
func (t *Tokens) Active(ctx context.Context, id string) error {
	if err := t.refreshIfStale(ctx); err != nil {
		return err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if r := t.byID[id]; r == nil || r.Revoked != nil {
		return ErrBadToken
	}
	return nil
}

// refreshIfStale re-reads the stream when the view is older than the
// refresh interval, once for all the callers that find it stale at the
// same time (every open event stream checks its token every second).
func (t *Tokens) refreshIfStale(ctx context.Context) error {
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
	if err := t.s.refresh(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	t.checked = t.clock()
	t.mu.Unlock()
	return nil
}

// revocations returns a channel that is closed at the next revocation
// this Tokens folds (made here, or read from the stream).
func (t *Tokens) revocations() <-chan struct{} {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.revoked
}

// Count returns the number of tokens that are not revoked.
func (t *Tokens) Count(ctx context.Context) (int, error) {
	if err := t.s.refresh(ctx); err != nil {
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

// randomString returns n random bytes as lowercase base32.
func randomString(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("server: random: %w", err)
	}
	return b32.EncodeToString(b), nil
}
