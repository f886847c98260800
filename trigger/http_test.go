package trigger

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHandler sends real HTTP requests: a message delivered three times
// (a sender's retries) starts one run, and refusals get their status.
func TestHandler(t *testing.T) {
	t.Parallel()
	h, r, clk, secret, _ := setup(t)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/triggers/{id}", h.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	post := func(id string, header http.Header, body string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/triggers/"+id, bytes.NewReader([]byte(body)))
		req.Header = header
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	var statuses []int
	for range 3 {
		code, out := post("deploy-failed", signed(t, secret, "msg_http", clk.Now(), payload), payload)
		statuses = append(statuses, code)
		if out["run_id"] == nil {
			t.Errorf("no run id in %v", out)
		}
		clk.Add(10 * time.Second)
	}
	if statuses[0] != http.StatusAccepted || statuses[1] != http.StatusOK || statuses[2] != http.StatusOK || r.count() != 1 {
		t.Errorf("three deliveries: %v, %d runs", statuses, r.count())
	}
	for _, tt := range []struct {
		name   string
		header http.Header
		body   string
		want   int
	}{
		{"bad signature", signed(t, "whsec_"+strings.Repeat("C", 32), "m1", clk.Now(), payload), payload, http.StatusUnauthorized},
		{"old", signed(t, secret, "m2", clk.Now().Add(-10*time.Minute), payload), payload, http.StatusUnauthorized},
		{"replayed id", signed(t, secret, "msg_http", clk.Now(), "{}"), "{}", http.StatusConflict},
		{"no headers", http.Header{}, payload, http.StatusBadRequest},
		{"too large", signed(t, secret, "m3", clk.Now(), strings.Repeat("x", MaxBody+1)), strings.Repeat("x", MaxBody+1), http.StatusRequestEntityTooLarge},
	} {
		if code, out := post("deploy-failed", tt.header, tt.body); code != tt.want || out["error"] == nil {
			t.Errorf("%s: %d %v, want %d", tt.name, code, out, tt.want)
		}
	}
	if code, _ := post("nope", signed(t, secret, "m4", clk.Now(), payload), payload); code != http.StatusNotFound {
		t.Errorf("unknown trigger: %d", code)
	}
	if r.count() != 1 {
		t.Errorf("%d runs, want 1", r.count())
	}
}
