package cli

// The PostgreSQL journal for servers and clusters: --db postgres://... (or
// postgresql://...) opens it through the registry.
import _ "github.com/keel-run/keel/journal/postgres"
