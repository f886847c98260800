package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Stdio is the transport of keel mcp serve: the SDK's newline-delimited
// JSON over in and out, with two repairs to how a client's mistakes and
// its end are taken.
//
//   - A line that is not JSON is answered with a JSON-RPC parse error
//     (-32700, id null) and skipped; the session goes on. The SDK's own
//     stdio transport ends the session on such a line
//     (modelcontextprotocol/go-sdk#1209), dropping the answers to the
//     requests before it.
//   - At the end of in, the requests already read are answered before
//     the session ends (for at most drain), so `printf '...' | keel mcp
//     serve` gets every answer.
func Stdio(in io.Reader, out io.Writer, drain time.Duration) sdk.Transport {
	w := &lockedWriter{w: out, pending: map[string]bool{}}
	w.cond = sync.NewCond(&w.mu)
	r := &lineFilter{in: bufio.NewReader(in), out: w, drain: drain}
	return &sdk.IOTransport{Reader: io.NopCloser(r), Writer: nopCloser{w}}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// lockedWriter writes whole messages to out, one at a time, and keeps
// the ids of the client's requests not answered yet.
type lockedWriter struct {
	mu      sync.Mutex
	cond    *sync.Cond
	w       io.Writer
	pending map[string]bool
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range responseIDs(p) {
		delete(w.pending, id)
	}
	w.cond.Broadcast()
	return w.w.Write(p)
}

func (w *lockedWriter) request(id string) {
	w.mu.Lock()
	w.pending[id] = true
	w.mu.Unlock()
}

func (w *lockedWriter) forget(id string) {
	w.mu.Lock()
	delete(w.pending, id)
	w.cond.Broadcast()
	w.mu.Unlock()
}

// wait returns once every request read has been answered, or after d.
func (w *lockedWriter) wait(d time.Duration) {
	timer := time.AfterFunc(d, func() {
		w.mu.Lock()
		w.pending = map[string]bool{}
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.pending) > 0 {
		w.cond.Wait()
	}
}

// lineFilter hands the SDK's decoder only lines that are JSON.
type lineFilter struct {
	in    *bufio.Reader
	out   *lockedWriter
	drain time.Duration
	buf   []byte
	eof   bool
}

func (f *lineFilter) Read(p []byte) (int, error) {
	for len(f.buf) == 0 {
		if f.eof {
			f.out.wait(f.drain)
			return 0, io.EOF
		}
		line, err := f.in.ReadBytes('\n')
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return 0, err
			}
			f.eof = true
		}
		f.buf = f.take(line)
	}
	n := copy(p, f.buf)
	f.buf = f.buf[n:]
	return n, nil
}

// take returns what of line goes on to the decoder: the line if it is
// JSON (noting the requests in it), else nothing, after answering it
// with a parse error.
func (f *lineFilter) take(line []byte) []byte {
	text := bytes.TrimSpace(line)
	if len(text) == 0 {
		return nil
	}
	if !json.Valid(text) {
		f.refuse(nil, jsonrpc.CodeParseError, "parse error: the line is not JSON")
		return nil
	}
	if text[0] != '[' {
		if _, err := jsonrpc.DecodeMessage(text); err != nil {
			var m wireMessage
			_ = json.Unmarshal(text, &m)
			f.refuse(m.ID, jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error())
			return nil
		}
	}
	for _, m := range messages(text) {
		switch {
		case m.Method == "notifications/cancelled":
			var p struct {
				RequestID json.RawMessage `json:"requestId"`
			}
			if json.Unmarshal(m.Params, &p) == nil && len(p.RequestID) > 0 {
				f.out.forget(string(p.RequestID))
			}
		case m.Method != "" && len(m.ID) > 0 && string(m.ID) != "null":
			f.out.request(string(m.ID))
		}
	}
	out := make([]byte, 0, len(text)+1)
	return append(append(out, text...), '\n')
}

// refuse answers a line the SDK would end the session on.
func (f *lineFilter) refuse(id json.RawMessage, code int64, msg string) {
	if len(id) == 0 || (id[0] != '"' && (id[0] < '0' || id[0] > '9') && id[0] != '-') {
		id = json.RawMessage("null")
	}
	line, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpc.Error   `json:"error"`
	}{"2.0", id, jsonrpc.Error{Code: code, Message: msg}})
	_, _ = f.out.Write(append(line, '\n'))
}

type wireMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// messages decodes a line holding one message or a batch of them;
// what does not decode is left to the SDK to refuse.
func messages(text []byte) []wireMessage {
	if text[0] == '[' {
		var batch []wireMessage
		_ = json.Unmarshal(text, &batch)
		return batch
	}
	var m wireMessage
	if json.Unmarshal(text, &m) != nil {
		return nil
	}
	return []wireMessage{m}
}

// responseIDs returns the ids of the responses in what the SDK writes.
func responseIDs(p []byte) []string {
	text := bytes.TrimSpace(p)
	if len(text) == 0 {
		return nil
	}
	var ids []string
	for _, m := range messages(text) {
		if m.Method == "" && len(m.ID) > 0 {
			ids = append(ids, string(m.ID))
		}
	}
	return ids
}
