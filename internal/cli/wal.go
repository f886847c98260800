package cli

import (
	"fmt"
	"strings"

	"github.com/keel-run/keel/journal/sqlite"
)

// warnTornWAL reports a torn tail of the journal's write-ahead log on
// stderr (sqlite.InspectWAL), before SQLite's recovery silently drops it.
func (a *app) warnTornWAL(dsn string) {
	if s, _, ok := strings.Cut(dsn, ":"); ok && s != "sqlite" && len(s) > 1 && !strings.Contains(s, "/") {
		return // another backend
	}
	t, err := sqlite.InspectWAL(dsn)
	if err != nil {
		fmt.Fprintf(a.stderr, "keel: warning: %v\n", err)
		return
	}
	if t != nil && t.Torn > 0 {
		fmt.Fprintf(a.stderr, "keel: warning: the journal's write-ahead log %s-wal ends with a torn write: %d bytes after offset %d (%s). "+
			"They are an append cut off by a crash; SQLite ignores them and every event before them is kept (keel audit verify --all checks the chains).\n",
			t.Path, t.Torn, t.End, t.Reason)
	}
}
