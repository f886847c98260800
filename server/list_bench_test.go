package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal/postgres"
	"github.com/keel-run/keel/model"
)

// listEnv is a server with n runs waiting for an approval each, as in the
// cluster's waiting-runs test, on SQLite or, with pg, on a database of
// the test binary's PostgreSQL.
func listEnv(b *testing.B, n int, pg bool) *env {
	var o *envOptions
	if pg {
		s, err := postgres.Open(b.Context(), testenv.Postgres(b))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		o = &envOptions{store: s}
	}
	e := newEnv(b, o)
	ws := b.TempDir()
	for i := range n {
		e.askingRun(ws, model.ToolCall{ID: fmt.Sprintf("call_%d", i), Name: "bash", Arguments: `{"command":"make test"}`})
	}
	return e
}

// benchGet serves GET path on e's handler (no network) b.N times and
// reports the allocations of one request. The first request, which
// fills the summaries' cache, is outside the measurement.
func benchGet(b *testing.B, e *env, path string) {
	get := func() {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+e.secret)
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
	}
	get()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		get()
	}
}

// BenchmarkListRuns is GET /v1/runs (a dashboard's poll) on a server
// with 300 waiting runs: the whole list, and its newest page of 50.
func BenchmarkListRuns(b *testing.B) {
	e := listEnv(b, 300, false)
	b.Run("all", func(b *testing.B) { benchGet(b, e, "/v1/runs") })
	b.Run("limit=50", func(b *testing.B) { benchGet(b, e, "/v1/runs?limit=50") })
}

// BenchmarkListRunsPostgres is BenchmarkListRuns on PostgreSQL.
func BenchmarkListRunsPostgres(b *testing.B) {
	e := listEnv(b, 300, true)
	b.Run("all", func(b *testing.B) { benchGet(b, e, "/v1/runs") })
	b.Run("limit=50", func(b *testing.B) { benchGet(b, e, "/v1/runs?limit=50") })
}

// BenchmarkListApprovals is GET /v1/approvals on a server with 300 runs
// waiting for one approval each.
func BenchmarkListApprovals(b *testing.B) {
	e := listEnv(b, 300, false)
	benchGet(b, e, "/v1/approvals")
}

// BenchmarkListApprovalsPostgres is BenchmarkListApprovals on PostgreSQL.
func BenchmarkListApprovalsPostgres(b *testing.B) {
	e := listEnv(b, 300, true)
	benchGet(b, e, "/v1/approvals")
}
