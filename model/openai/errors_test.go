package openai_test

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/openai/openai-go/v3"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/model/openai"
	"github.com/keel-run/keel/model/replay"
)

// cassette is one recorded HTTP response in testdata/.
type cassette struct {
	Source string            `json:"source"`
	Status int               `json:"status"`
	Header map[string]string `json:"header"`
	Body   json.RawMessage   `json:"body"`
}

func loadCassette(t *testing.T, name string) cassette {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var c cassette
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

// serveCassette answers every request with c and counts the requests.
func serveCassette(t *testing.T, c cassette) (*atomic.Int32, *httptest.Server) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.Copy(io.Discard, r.Body)
		for k, v := range c.Header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(c.Status)
		w.Write(c.Body)
	}))
	t.Cleanup(srv.Close)
	return &n, srv
}

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file       string
		kind       model.ErrorKind
		retryAfter time.Duration
		message    string
	}{
		{"error_429_rate_limit.json", model.KindRateLimited, 20 * time.Second, "rate_limit_exceeded: Rate limit reached for gpt-4o"},
		{"error_401_invalid_api_key.json", model.KindAuth, 0, "Incorrect API key provided: [REDACTED]. You can find"},
		{"error_400_context_length_exceeded.json", model.KindContextOverflow, 0, "maximum context length is 128000 tokens"},
		{"error_400_compatible_context_length.json", model.KindContextOverflow, 0, "maximum context length is 65536 tokens"},
		{"error_404_model_not_found.json", model.KindInvalidRequest, 0, "model_not_found: The model `gpt-9` does not exist"},
		{"error_500_server_error.json", model.KindRetryable, 0, "server_error: The server had an error"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			c := loadCassette(t, tt.file)
			n, srv := serveCassette(t, c)
			// MaxRetries -1: the SDK would otherwise honour retry-after.
			m := newModel(t, srv, &openai.Options{Model: "gpt-4o", APIKey: "sk-test", MaxRetries: -1})
			resp, err := m.Generate(t.Context(), userRequest())
			if resp != nil {
				t.Errorf("Generate returned a response with the error: %+v", resp)
			}
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("Generate error = %v (%T), want *model.Error", err, err)
			}
			if me.Kind != tt.kind || me.StatusCode != c.Status || me.Provider != "openai" {
				t.Errorf("error = kind %s, status %d, provider %q; want %s, %d, openai", me.Kind, me.StatusCode, me.Provider, tt.kind, c.Status)
			}
			if me.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %v, want %v", me.RetryAfter, tt.retryAfter)
			}
			if !strings.Contains(me.Message, tt.message) {
				t.Errorf("Message = %q, want it to contain %q", me.Message, tt.message)
			}
			var apiErr *sdk.Error
			if !errors.As(err, &apiErr) {
				t.Errorf("error does not wrap the SDK's *openai.Error")
			}
			if n.Load() != 1 {
				t.Errorf("server saw %d requests, want 1", n.Load())
			}
		})
	}
}

// TestSDKRetries checks that 429 and 5xx are retried by the SDK (not by a
// loop of ours), honouring the provider's delay.
func TestSDKRetries(t *testing.T) {
	t.Parallel()
	tr := loadTrajectory(t, "deepseek_chat_dev.traj.json")
	first, _ := tr.Turn(0)
	for _, status := range []int{429, 503} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					w.Header().Set("Retry-After-Ms", "1")
					w.WriteHeader(status)
					io.WriteString(w, `{"error":{"message":"try again","type":"server_error"}}`)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.Write(first.Response)
			}))
			t.Cleanup(srv.Close)
			resp, err := newModel(t, srv, nil).Generate(t.Context(), userRequest())
			if err != nil || resp.ID != first.ResponseID {
				t.Fatalf("Generate = %+v, %v; want the second answer", resp, err)
			}
			if n.Load() != 2 {
				t.Errorf("server saw %d requests, want 2", n.Load())
			}
		})
	}
}

// A 429 whose Retry-After is longer than the SDK waits fails the call
// with the provider's delay, said in the error.
func TestLongRetryAfterIsSaid(t *testing.T) {
	t.Parallel()
	for _, header := range []string{"Retry-After", "Retry-After-Ms"} {
		t.Run(header, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				v := "3600"
				if header == "Retry-After-Ms" {
					v = "3600000"
				}
				w.Header().Set(header, v)
				w.WriteHeader(http.StatusTooManyRequests)
				io.WriteString(w, `{"error":{"message":"You exceeded your current quota","type":"requests","code":"rate_limit_exceeded"}}`)
			}))
			t.Cleanup(srv.Close)
			_, err := newModel(t, srv, &openai.Options{Model: "gpt-4o", APIKey: "sk-test", MaxRetries: 1, RetryBackoff: func(int) time.Duration { return 0 }}).Generate(t.Context(), userRequest())
			var me *model.Error
			if !errors.As(err, &me) || me.Kind != model.KindRateLimited || me.RetryAfter != time.Hour {
				t.Fatalf("Generate error = %v, want a rate limit asking for an hour", err)
			}
			if !strings.Contains(err.Error(), "the provider asked to wait 1h0m0s before the next request") {
				t.Errorf("the error does not say the provider's wait: %v", err)
			}
		})
	}
}

func TestAPIKeyNotInErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": "Incorrect API key provided: " + key, "type": "invalid_request_error", "code": "invalid_api_key"}})
	}))
	t.Cleanup(srv.Close)
	m := newModel(t, srv, &openai.Options{Model: "m", APIKey: modeltest.SecretKey})
	_, err := m.Generate(t.Context(), userRequest())
	if model.KindOf(err) != model.KindAuth || strings.Contains(err.Error(), modeltest.SecretKey) {
		t.Errorf("Generate error = %v; want kind auth without the key", err)
	}
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m, err := openai.New(&openai.Options{Model: "m", BaseURL: "http://" + addr + "/v1", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Generate(t.Context(), userRequest())
	if model.KindOf(err) != model.KindRetryable || !strings.Contains(err.Error(), "connection failed") {
		t.Errorf("Generate error = %v, want a retryable connection failure", err)
	}
}

// stallServer writes half of a recorded response and then sends nothing
// until the client gives up. It counts the requests.
func stallServer(t *testing.T, body []byte) (*atomic.Int32, *httptest.Server) {
	t.Helper()
	var n atomic.Int32
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	return &n, srv
}

// TestStallNeverYieldsPartialToolCall serves half of a recorded response
// whose tool call is in the half that never arrives. The adapter must fail
// with KindStalled after 1 + StallRetries attempts, and not run the SDK's
// retries on top (3 requests, not 9).
func TestStallNeverYieldsPartialToolCall(t *testing.T) {
	t.Parallel()
	tr := loadTrajectory(t, "deepseek_chat_dev.traj.json")
	first, _ := tr.Turn(0)
	n, srv := stallServer(t, first.Response)
	m := newModel(t, srv, &openai.Options{Model: "deepseek-chat", IdleTimeout: 50 * time.Millisecond})
	resp, err := m.Generate(t.Context(), userRequest())
	if resp != nil {
		t.Fatalf("Generate returned a response from half a body: %+v", resp)
	}
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.KindStalled || me.Provider != "openai" {
		t.Fatalf("Generate error = %v, want an openai stall", err)
	}
	if want := "no bytes for 50ms on 3 attempts"; me.Message != want {
		t.Errorf("Message = %q, want %q", me.Message, want)
	}
	if n.Load() != 3 {
		t.Errorf("server saw %d requests, want 3", n.Load())
	}
}

// TestTruncatedBodyIsAnError cuts a recorded response short and closes the
// connection: the SDK retries it as a connection error and the adapter
// fails, with no response.
func TestTruncatedBodyIsAnError(t *testing.T) {
	t.Parallel()
	tr := loadTrajectory(t, "deepseek_chat_dev.traj.json")
	first, _ := tr.Turn(0)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(first.Response)))
		w.WriteHeader(http.StatusOK)
		w.Write(first.Response[:len(first.Response)-40])
		w.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	m := newModel(t, srv, &openai.Options{Model: "deepseek-chat", MaxRetries: 1})
	resp, err := m.Generate(t.Context(), userRequest())
	if resp != nil || model.KindOf(err) != model.KindRetryable {
		t.Fatalf("Generate = %+v, %v; want no response and a retryable error", resp, err)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("error %v does not wrap io.ErrUnexpectedEOF", err)
	}
	if n.Load() != 2 {
		t.Errorf("server saw %d requests, want 2 (the SDK's one retry)", n.Load())
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	tr := loadTrajectory(t, "deepseek_chat_dev_rerun.traj.json")
	srv := httptest.NewServer(replay.NewHandler(tr))
	t.Cleanup(srv.Close)
	modeltest.Run(t, func(t *testing.T) model.Model {
		m, err := openai.New(&openai.Options{Model: "deepseek-chat", APIKey: modeltest.SecretKey, BaseURL: srv.URL + "/v1"})
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
}

func TestErrorConformance(t *testing.T) {
	t.Parallel()
	tr := loadTrajectory(t, "deepseek_chat_dev.traj.json")
	first, _ := tr.Turn(0)
	files := map[model.ErrorKind]string{
		model.KindRetryable:       "error_500_server_error.json",
		model.KindRateLimited:     "error_429_rate_limit.json",
		model.KindAuth:            "error_401_invalid_api_key.json",
		model.KindContextOverflow: "error_400_context_length_exceeded.json",
		model.KindInvalidRequest:  "error_404_model_not_found.json",
	}
	modeltest.RunErrors(t, func(t *testing.T, kind model.ErrorKind) model.Model {
		var srv *httptest.Server
		opts := &openai.Options{Model: "gpt-4o", APIKey: modeltest.SecretKey, MaxRetries: -1}
		switch {
		case files[kind] != "":
			_, srv = serveCassette(t, loadCassette(t, files[kind]))
		case kind == model.KindStalled:
			_, srv = stallServer(t, first.Response)
			opts.IdleTimeout, opts.StallRetries = 20*time.Millisecond, 1
		default:
			return nil
		}
		opts.BaseURL = srv.URL + "/v1"
		m, err := openai.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
}
