package anthropic_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/anthropic"
)

// An HTTP 200 whose body is not a message (JSON null, an empty object)
// is a retryable model error, never a crash or an empty answer.
func TestUnusableAnswers(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`null`, `{}`, `{"type":"error"}`} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(body))
		}))
		m, err := anthropic.New(&anthropic.Options{APIKey: "k", Model: "claude-x", BaseURL: srv.URL, MaxRetries: -1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Generate(t.Context(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
		if model.KindOf(err) != model.KindRetryable {
			t.Errorf("body %s: Generate error = %v (%s), want retryable", body, err, model.KindOf(err))
		}
		srv.Close()
	}
}
