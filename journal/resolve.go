package journal

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
)

// MinRunPrefix is the shortest prefix of a run id [ResolveRun] accepts:
// shorter ones would match by accident (every id of one month shares its
// first characters).
const MinRunPrefix = 4

// ErrAmbiguousRun is wrapped by [ResolveRun]'s error when a prefix
// matches more than one run.
var ErrAmbiguousRun = errors.New("journal: ambiguous run id")

// ResolveRun returns the id of the run ref names in s: its whole id; a
// prefix of it at least [MinRunPrefix] characters long that no other run
// of s starts with, but for the run's own child agents (whose ids are
// RUN.CALL: every prefix of a team lead's id is also one of its
// children's, and names the lead); or the shortened form "PREFIX…SUFFIX" (also with
// "..."), the way the web UI shows ids. Letters are compared without
// regard to case; system streams (_keel.*) are never matched. An unknown
// ref gives an error wrapping [ErrNotFound], an ambiguous one an error
// wrapping [ErrAmbiguousRun] that names the candidates. This is the one
// place run references are resolved: the command line (local and, on the
// server, remote) and the HTTP API use it.
func ResolveRun(ctx context.Context, s Store, ref string) (string, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return "", fmt.Errorf("%w: an empty run id", ErrNotFound)
	}
	if !IsSystem(ref) {
		if _, err := s.Read(ctx, ref, math.MaxInt64); err == nil {
			return ref, nil
		} else if !errors.Is(err, ErrNotFound) {
			return "", err
		}
	}
	prefix, suffix := strings.ToLower(ref), ""
	for _, sep := range []string{"…", "..."} {
		if p, q, ok := strings.Cut(prefix, sep); ok {
			prefix, suffix = p, q
			break
		}
	}
	if len(prefix) < MinRunPrefix {
		return "", fmt.Errorf("%w: no run %q (give at least %d characters of its id)", ErrNotFound, ref, MinRunPrefix)
	}
	runs, err := s.Runs(ctx, nil)
	if err != nil {
		return "", err
	}
	var match []string
	for _, r := range runs {
		id := strings.ToLower(r.RunID)
		if IsSystem(r.RunID) || !strings.HasPrefix(id, prefix) || !strings.HasSuffix(id[len(prefix):], suffix) {
			continue
		}
		match = append(match, r.RunID)
	}
	switch {
	case len(match) == 1:
		return match[0], nil
	case len(match) == 0:
		return "", fmt.Errorf("%w: no run id starts with %q", ErrNotFound, ref)
	}
	if lead, ok := leadOf(match); ok {
		return lead, nil
	}
	shown := match
	if len(shown) > 5 {
		shown = shown[:5]
	}
	more := ""
	if len(match) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(match)-len(shown))
	}
	return "", fmt.Errorf("%w: %q matches %d runs (%s%s): give more of its id", ErrAmbiguousRun, ref, len(match), strings.Join(shown, ", "), more)
}

// leadOf returns the run among ids whose descendants (ID.CALL, at any
// depth) all the others are, if there is one.
func leadOf(ids []string) (string, bool) {
	lead := ids[0]
	for _, id := range ids[1:] {
		if len(id) < len(lead) {
			lead = id
		}
	}
	for _, id := range ids {
		if id != lead && !strings.HasPrefix(strings.ToLower(id), strings.ToLower(lead)+".") {
			return "", false
		}
	}
	return lead, true
}
