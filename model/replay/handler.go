package replay

import (
	"encoding/json"
	"fmt"
	"net/http"

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
// It applies the checks of [Model] (tools offered, history ids). Errors are
// OpenAI-format JSON ({"error": {"message", "type", "param", "code"}}) with
// "x-should-retry: false": 400 for a malformed request, a streaming request,
// an exhausted trajectory (code "replay_exhausted") or a mismatch (code
// "replay_mismatch"); 404 for an unknown path; 405 for a wrong method; 500
// for a turn recorded without a response. The handler is safe for
// concurrent use.
func NewHandler(tr *Trajectory) http.Handler { return &handler{tr: tr} }

type handler struct{ tr *Trajectory }

// chatRequest is the part of a chat completions request the handler reads.
type chatRequest struct {
	Stream   bool `json:"stream"`
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
	if req.Stream {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "stream_unsupported", "serve-replay answers non-streaming requests only; send stream: false")
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
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(t.Response)
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
