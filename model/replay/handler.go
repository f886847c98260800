package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/keel-run/keel/model"
)

// maxRequestBytes bounds a request body the handler reads.
const maxRequestBytes = 64 << 20

// NewHandler returns an OpenAI-compatible HTTP API serving tr, the backend
// of `keel model serve-replay TRAJECTORY`:
//
//   - POST /v1/chat/completions and POST /chat/completions answer the k-th
//     request (k = the number of messages with role "assistant" in it) with
//     turn k's extra.response exactly as recorded, byte for byte, under
//     Content-Type application/json;
//   - GET /v1/models and GET /models list the recorded model.
//
// A request with "stream": true gets the same turn as server-sent events
// of chat.completion.chunk objects, as OpenAI streams them: the text, each
// tool call whole, the finish reason, then (with
// stream_options.include_usage) the recorded usage object as sent, and
// "data: [DONE]". An OpenAI client therefore accumulates exactly the
// recorded answer, either way it asks.
//
// It applies the checks of [Model] (tools offered, history ids). Errors are
// OpenAI-format JSON ({"error": {"message", "type", "param", "code"}}) with
// "x-should-retry: false": 400 for a malformed request, an exhausted trajectory (code "replay_exhausted") or a mismatch (code
// "replay_mismatch"); 404 for an unknown path; 405 for a wrong method; 500
// for a turn recorded without a response. The handler is safe for
// concurrent use.
func NewHandler(tr *Trajectory) http.Handler { return &handler{tr: tr} }

type handler struct{ tr *Trajectory }

// chatRequest is the part of a chat completions request the handler reads.
type chatRequest struct {
	Stream        bool `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Role      string `json:"role"`
		ToolCalls []struct {
			ID string `json:"id"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/chat/completions", "/chat/completions":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", r.Method+" is not allowed; use POST")
			return
		}
		h.complete(w, r)
	case "/v1/models", "/models":
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", r.Method+" is not allowed; use GET")
			return
		}
		h.models(w)
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "unknown path "+r.URL.Path+"; serve-replay serves /v1/chat/completions and /v1/models")
	}
}

func (h *handler) complete(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "request body is not a chat completions request: "+err.Error())
		return
	}
	var history [][]string
	for _, m := range req.Messages {
		if m.Role != "assistant" {
			continue
		}
		ids := make([]string, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			ids[i] = c.ID
		}
		history = append(history, ids)
	}
	offered := make([]string, len(req.Tools))
	for i, t := range req.Tools {
		offered[i] = t.Function.Name
	}
	t, merr := h.tr.answer(0, history, offered, Options{})
	if merr != nil {
		code := "replay_mismatch"
		if merr.Kind == model.KindExhausted {
			code = "replay_exhausted"
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", code, merr.Message)
		return
	}
	if len(t.Response) == 0 {
		writeError(w, http.StatusInternalServerError, "server_error", "no_recorded_response", fmt.Sprintf("turn %d was recorded without extra.response", t.Index+1))
		return
	}
	if req.Stream {
		chunks, err := streamChunks(t.Response, req.StreamOptions.IncludeUsage)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "server_error", "unstreamable_response", fmt.Sprintf("turn %d's recorded response cannot be streamed: %v", t.Index+1, err))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
		io.WriteString(w, "data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(t.Response)
}

// recordedCompletion is the part of a recorded chat.completion that
// streamChunks re-sends; the usage object stays as recorded (DeepSeek's
// cache counts are fields of its own).
type recordedCompletion struct {
	ID                string          `json:"id"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint,omitempty"`
	Usage             json.RawMessage `json:"usage,omitempty"`
	Choices           []struct {
		Index        int    `json:"index"`
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Role      string `json:"role"`
			Content   string `json:"content"`
			ToolCalls []struct {
				ID       string          `json:"id"`
				Type     string          `json:"type"`
				Function json.RawMessage `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
}

// streamChunks turns a recorded chat.completion into the chunks OpenAI
// would have streamed for it.
func streamChunks(raw json.RawMessage, includeUsage bool) ([][]byte, error) {
	var cc recordedCompletion
	if err := json.Unmarshal(raw, &cc); err != nil {
		return nil, err
	}
	var chunks [][]byte
	add := func(choices []any, usage json.RawMessage) error {
		c := map[string]any{"id": cc.ID, "object": "chat.completion.chunk", "created": cc.Created, "model": cc.Model, "choices": choices}
		if cc.SystemFingerprint != "" {
			c["system_fingerprint"] = cc.SystemFingerprint
		}
		if usage != nil {
			c["usage"] = usage
		}
		b, err := json.Marshal(c)
		chunks = append(chunks, b)
		return err
	}
	choice := func(index int, delta map[string]any, finish any) []any {
		return []any{map[string]any{"index": index, "delta": delta, "finish_reason": finish, "logprobs": nil}}
	}
	for _, ch := range cc.Choices {
		role := ch.Message.Role
		if role == "" {
			role = "assistant"
		}
		if err := add(choice(ch.Index, map[string]any{"role": role, "content": ch.Message.Content}, nil), nil); err != nil {
			return nil, err
		}
		for i, tc := range ch.Message.ToolCalls {
			call := map[string]any{"index": i, "id": tc.ID, "type": tc.Type, "function": tc.Function}
			if err := add(choice(ch.Index, map[string]any{"tool_calls": []any{call}}, nil), nil); err != nil {
				return nil, err
			}
		}
		if err := add(choice(ch.Index, map[string]any{}, ch.FinishReason), nil); err != nil {
			return nil, err
		}
	}
	if includeUsage && len(cc.Usage) > 0 && string(cc.Usage) != "null" {
		if err := add([]any{}, cc.Usage); err != nil {
			return nil, err
		}
	}
	return chunks, nil
}

func (h *handler) models(w http.ResponseWriter) {
	type entry struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []entry `json:"data"`
	}{Object: "list", Data: []entry{}}
	if name := h.tr.Model(); name != "" {
		list.Data = append(list.Data, entry{ID: name, Object: "model", OwnedBy: "keel-replay"})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(list)
}

// writeError writes an OpenAI-format error that the SDKs do not retry.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	body := map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Should-Retry", "false")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

// Serve answers requests on ln with tr's recorded responses
// ([NewHandler]) until ctx ends, then shuts the server down, letting
// requests in progress finish (for 5 seconds at most).
func Serve(ctx context.Context, ln net.Listener, tr *Trajectory) error {
	srv := &http.Server{Handler: NewHandler(tr), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}
