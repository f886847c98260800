package cli

import (
	"time"

	// The PostgreSQL journal for servers and clusters: --db
	// postgres://... (or postgresql://...) opens it through the registry.
	"github.com/keel-run/keel/internal/serve"
	_ "github.com/keel-run/keel/journal/postgres"
)

// adoptInterval is serve's --adopt: as given, else 5 s on PostgreSQL
// (where several servers share the journal) and off on SQLite.
func (f *serveFlags) adoptInterval(dsn string) time.Duration {
	if f.adoptSet || !serve.IsPostgres(dsn) {
		return f.adopt
	}
	return 5 * time.Second
}
