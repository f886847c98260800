package journal_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

// A run is named by its whole id, a unique prefix of it, or the
// shortened PREFIX…SUFFIX form the web UI prints; too short, unknown and
// ambiguous references are refused, saying which.
func TestResolveRun(t *testing.T) {
	t.Parallel()
	s := mem.New()
	for _, id := range []string{"01m94ttn1gb0wd6n87kpdspawb", "01m94ttn1gb0wd6n87kpdspxyz", "01m95aaaaaaaaaaaaaaaaaaaaa", "_keel.identity",
		"01m97leadaaaaaaaaaaaaaaaaa", "01m97leadaaaaaaaaaaaaaaaaa.c1", "01m97leadaaaaaaaaaaaaaaaaa.c1.c2", "01m97leadaaaaaaaaaaaaaaaaa.c3"} {
		if _, err := s.Append(t.Context(), id, 0, journal.Draft{Type: journal.RunCreated, Time: time.Unix(1, 0), Payload: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		ref, want string
		err       error
		msg       string
	}{
		{ref: "01m94ttn1gb0wd6n87kpdspawb", want: "01m94ttn1gb0wd6n87kpdspawb"},
		{ref: " 01M95AAA ", want: "01m95aaaaaaaaaaaaaaaaaaaaa"},
		{ref: "01m95", want: "01m95aaaaaaaaaaaaaaaaaaaaa"},
		{ref: "01m9…spawb", want: "01m94ttn1gb0wd6n87kpdspawb"},
		{ref: "01m9...pxyz", want: "01m94ttn1gb0wd6n87kpdspxyz"},
		{ref: "01m94ttn", err: journal.ErrAmbiguousRun, msg: `"01m94ttn" matches 2 runs (01m94ttn1gb0wd6n87kpdspxyz, 01m94ttn1gb0wd6n87kpdspawb)`},
		// A team lead's prefix matches its children (LEAD.CALL) too: a
		// prefix that matches a run and only that run's own children
		// names the run (newuser report 14, Q2).
		{ref: "01m97lead", want: "01m97leadaaaaaaaaaaaaaaaaa"},
		{ref: "01m97leadaaaaaaaaaaaaaaaa", want: "01m97leadaaaaaaaaaaaaaaaaa"},
		{ref: "01m97leadaaaaaaaaaaaaaaaaa.c", err: journal.ErrAmbiguousRun, msg: "matches 3 runs"},
		{ref: "01m97leadaaaaaaaaaaaaaaaaa.c1", want: "01m97leadaaaaaaaaaaaaaaaaa.c1"},
		{ref: "01m9", err: journal.ErrAmbiguousRun, msg: "matches 7 runs"},
		{ref: "01m", err: journal.ErrNotFound, msg: "give at least 4 characters"},
		{ref: "01m96", err: journal.ErrNotFound, msg: `no run id starts with "01m96"`},
		{ref: "_kee", err: journal.ErrNotFound},
		{ref: "_keel.identity", err: journal.ErrNotFound},
		{ref: "", err: journal.ErrNotFound},
	} {
		got, err := journal.ResolveRun(t.Context(), s, tt.ref)
		if got != tt.want || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) || !strings.Contains(errString(err), tt.msg) {
			t.Errorf("ResolveRun(%q) = %q, %v; want %q, %v (%q)", tt.ref, got, err, tt.want, tt.err, tt.msg)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
