package assemble

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/tool/mcp"
	"github.com/keel-run/keel/visible"
)

// maxQuestion bounds the message of a server's question a person sees.
const maxQuestion = 4000

// elicit turns an MCP server's request for a person's input during a
// call into a durable wait of the run (input.requested), answered with
// keel inputs answer, the API or the web UI.
func (w *Run) elicit(ctx context.Context, q *mcp.Question) (*sdk.ElicitResult, error) {
	p := q.Params
	mode := p.Mode
	if mode == "" {
		mode = "form"
	}
	var schema json.RawMessage
	if p.RequestedSchema != nil {
		b, err := json.Marshal(p.RequestedSchema)
		if err != nil {
			return nil, fmt.Errorf("the requested schema does not encode: %v", err)
		}
		schema = b
	}
	msg := visible.String(p.Message)
	if len(msg) > maxQuestion {
		msg = msg[:maxQuestion] + " [cut]"
	}
	h := sha256.New()
	for _, s := range []string{q.Server, mode, p.Message, string(schema), p.URL} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	a, err := w.Recorder.AskInput(ctx, &agent.InputRequested{CallID: q.CallID, Tool: q.Tool, Server: q.Server, Mode: mode, Message: msg,
		Schema: schema, URL: p.URL, Fingerprint: hex.EncodeToString(h.Sum(nil))[:16]})
	if err != nil {
		return nil, err
	}
	res := &sdk.ElicitResult{Action: a.Action}
	if a.Action == "accept" && len(a.Content) > 0 {
		if err := json.Unmarshal(a.Content, &res.Content); err != nil {
			return nil, fmt.Errorf("the journaled answer does not decode: %v", err)
		}
	}
	return res, nil
}
