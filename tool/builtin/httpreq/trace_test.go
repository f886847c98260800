package httpreq_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/httpreq"
)

// A request sent in a traced call carries the call's traceparent.
func TestHTTPRequestPropagatesTraceParent(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("traceparent")
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	_, h := httpreq.New(&httpreq.Options{})
	env := &tool.Env{Network: sandbox.Network{Allow: []string{"localhost:" + port}}}
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := tool.WithTraceParent(t.Context(), tp)
	res, err := h(ctx, &tool.Request{RunID: "r", CallID: "c", Arguments: json.RawMessage(`{"method":"GET","url":"http://localhost:` + port + `/x"}`), Env: env})
	if err != nil || res.IsError {
		t.Fatalf("http_request = %+v, %v", res, err)
	}
	if got != tp {
		t.Errorf("traceparent = %q, want %q", got, tp)
	}
}
