package journal

import (
	"context"
	"strings"
	"unicode"
)

// TextIndex is an optional interface of a [Store]: a full-text index of
// short documents kept in the same database as the events (SQLite FTS5,
// PostgreSQL text search). It holds derived state only: the documents are
// copies of text whose record is an event (a memory entry, a skill's
// description), so an index can always be rebuilt from the journal, and
// what it answers is never a source of truth. Each document is named by
// (kind, key) and remembers the sequence number of the event it was
// taken from, so that an owner folding a stream can index only what is
// newer than the index ([TextIndex.IndexedUpTo]).
//
// Implementations are safe for concurrent use.
type TextIndex interface {
	// IndexText stores text as the document (kind, key), replacing
	// an earlier one; seq is the event the text comes from.
	IndexText(ctx context.Context, kind, key, text string, seq int64) error
	// UnindexText removes the document; removing a missing one is not
	// an error.
	UnindexText(ctx context.Context, kind, key string) error
	// SearchText returns up to limit keys of kind whose documents match
	// any term of query (see [SearchTerms]), best match first (ties by
	// key). A query without terms matches nothing.
	SearchText(ctx context.Context, kind, query string, limit int) ([]string, error)
	// IndexedUpTo returns the newest seq given to IndexText for kind
	// (0 when none).
	IndexedUpTo(ctx context.Context, kind string) (int64, error)
}

// maxSearchTerms bounds the terms of one query.
const maxSearchTerms = 32

// SearchTerms splits a query into the terms a [TextIndex] matches: the
// words of [SearchWords] at least two characters long and not common
// English words, without duplicates, at most 32 in the order they first
// appear. A document matches a term when one of its words equals it, on
// SQLite and on PostgreSQL alike, and no operator of either query
// language ever reaches a backend.
func SearchTerms(query string) []string {
	var terms []string
	seen := map[string]bool{}
	for _, f := range SearchWords(query) {
		if len([]rune(f)) < 2 || seen[f] || stopWords[f] {
			continue
		}
		seen[f] = true
		terms = append(terms, f)
		if len(terms) == maxSearchTerms {
			break
		}
	}
	return terms
}

// SearchWords returns the words of text as a [TextIndex] indexes them:
// runs of letters and digits, lower-cased. Backends index these words
// joined by spaces rather than the raw text, so that their own parsers
// (which treat paths, URLs and hyphenated words differently) agree.
func SearchWords(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// stopWords are common English words left out of queries: they match
// almost every document and say nothing of what is relevant.
var stopWords = map[string]bool{
	"the": true, "and": true, "for": true, "with": true, "that": true, "this": true, "are": true, "was": true,
	"is": true, "in": true, "on": true, "of": true, "to": true, "an": true, "be": true, "it": true, "as": true,
	"or": true, "by": true, "at": true, "from": true, "if": true, "not": true, "do": true, "we": true, "you": true,
}
