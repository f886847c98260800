package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keel-run/keel/model"
)

// listEnv is a server with n runs waiting for an approval each, as in the
// cluster's waiting-runs test.
func listEnv(b *testing.B, n int) *env {
	e := newEnv(b, nil)
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
	e := listEnv(b, 300)
	b.Run("all", func(b *testing.B) { benchGet(b, e, "/v1/runs") })
	b.Run("limit=50", func(b *testing.B) { benchGet(b, e, "/v1/runs?limit=50") })
}

// BenchmarkListApprovals is GET /v1/approvals on a server with 300 runs
// waiting for one approval each.
func BenchmarkListApprovals(b *testing.B) {
	e := listEnv(b, 300)
	benchGet(b, e, "/v1/approvals")
}
