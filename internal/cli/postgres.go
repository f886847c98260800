package cli

import (
	"strings"
	"time"

	// The PostgreSQL journal for servers and clusters: --db
	// postgres://... (or postgresql://...) opens it through the registry.
	_ "github.com/keel-run/keel/journal/postgres"
)

// isPostgres reports whether the journal DSN names a PostgreSQL database.
func isPostgres(dsn string) bool {
	l := strings.ToLower(dsn)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// adoptInterval is serve's --adopt: as given, else 5 s on PostgreSQL
// (where several servers share the journal) and off on SQLite.
func (f *serveFlags) adoptInterval(dsn string) time.Duration {
	if f.adoptSet || !isPostgres(dsn) {
		return f.adopt
	}
	return 5 * time.Second
}
