package memory

import (
	"strings"

	"github.com/keel-run/keel/internal/lazy"
)

// A run's journal holds what its memory tools returned as the text the
// model read: memory_search's entries (each a header naming its id and
// scope, then its text quoted with "> ") and memory_write's "kept as
// [memory:ID] in SCOPE". These read that text back, for those who show
// a run to a reader that may not see some of its memory: what the run
// holds of an entry is known from the run itself, never by looking for
// the entry's words elsewhere.

// Found is one entry of a memory_search result.
type Found struct {
	ID    string
	Scope Scope
	// Text is the entry's text as the result quotes it (cut where the
	// result was bounded).
	Text string
}

// foundHeader matches a memory_search result's line naming an entry.
var foundHeader = lazy.Regexp(`^\[memory:(mem_[0-9a-z]+)\] \(([^;)]*)`)

// entryID matches an entry's id.
var entryID = lazy.Regexp(`mem_[0-9a-z]{26}`)

// ParseSearch returns the entries of content, the text of a
// memory_search result, in order.
func ParseSearch(content string) []Found {
	var out []Found
	hideSearch(content, func(f Found) bool { out = append(out, f); return false }, "", "")
	return out
}

// HideSearch returns content, the text of a memory_search result, with
// the id of each entry hide reports replaced by id and its quoted text
// by note (quoted), and whether it replaced any.
func HideSearch(content string, hide func(Found) bool, id, note string) (string, bool) {
	return hideSearch(content, hide, id, note)
}

func hideSearch(content string, hide func(Found) bool, id, note string) (string, bool) {
	lines := strings.SplitAfter(content, "\n")
	var b strings.Builder
	changed := false
	for i := 0; i < len(lines); {
		m := foundHeader().FindStringSubmatch(lines[i])
		if m == nil {
			b.WriteString(lines[i])
			i++
			continue
		}
		header := lines[i]
		j := i + 1
		var text []string
		for j < len(lines) && strings.HasPrefix(lines[j], ">") {
			l := strings.TrimSuffix(lines[j], "\n")
			text = append(text, strings.TrimPrefix(strings.TrimPrefix(l, ">"), " "))
			j++
		}
		f := Found{ID: m[1], Scope: Scope(strings.TrimSpace(m[2])), Text: strings.Join(text, "\n")}
		if !hide(f) {
			for _, l := range lines[i:j] {
				b.WriteString(l)
			}
			i = j
			continue
		}
		changed = true
		b.WriteString(strings.Replace(header, f.ID, id, 1))
		if j > i+1 {
			b.WriteString("> " + note)
			if strings.HasSuffix(lines[j-1], "\n") {
				b.WriteString("\n")
			}
		}
		i = j
	}
	return b.String(), changed
}

// WrittenIDs returns the ids of entries content, the text of a
// memory_write result, names: the entry it kept, and the one it
// supersedes.
func WrittenIDs(content string) []string {
	return entryID().FindAllString(content, -1)
}
