package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// The web UI's cost page shows the report the API gives, and GET
// /v1/cost refuses a grouping it does not know.
func TestCostPageAndAPI(t *testing.T) {
	e := newEnv(t, nil)
	get := func(path string, cookie bool) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.srv.URL+path, nil)
		if cookie {
			req.AddCookie(e.cookie(e.secret))
		} else {
			req.Header.Set("Authorization", "Bearer "+e.secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/ui/cost?by=model", true); code != http.StatusOK || !strings.Contains(body, `<table id="cost">`) || !strings.Contains(body, "<b>total</b>") {
		t.Errorf("GET /ui/cost = %d:\n%s", code, body)
	}
	if code, body := get("/v1/cost?by=weather", false); code != http.StatusBadRequest || !strings.Contains(body, "weather") {
		t.Errorf("GET /v1/cost?by=weather = %d %s", code, body)
	}
	if code, body := get("/v1/cost?since=7d", false); code != http.StatusOK || !strings.Contains(body, `"total"`) {
		t.Errorf("GET /v1/cost = %d %s", code, body)
	}
}
