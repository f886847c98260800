package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// Sealing (docs/security.md, "A secret the model writes"). The model may
// write one of the run's secrets into a call's arguments (a hijacked
// model that read it, or a task that named it): the call must still run
// with the value when the gate allows it or a person approves it, but
// the journal, and so every printer, API and prompt that reads it, holds
// a placeholder naming the secret instead ([redact.Secrets.Seal]). The
// executor seals every payload it appends, folds the sealed event, and
// puts the values back ([secretScanner.unseal]) only where a call is
// validated, decided and run, in this process or in one that resumes the
// run with the same secrets.

// sealOpen starts every placeholder [redact.Secrets.Seal] writes.
const sealOpen = "«secret"

// seal returns payload as it is journaled: every string it holds (at any
// depth) sealed, and every string that is itself a JSON document (a tool
// call's raw arguments) sealed in its decoded strings too, so that a
// secret spelled with JSON escapes ("\u0053…") is not journaled either.
// In a model.responded payload, and in those whose text the executor
// derives from a call's unsealed arguments (gate.decided, tool.started;
// approval.requested's arguments and action, which [executor.ask] seals
// with [secretScanner.sealFresh], beside parts copied from the sealed
// decision), placeholder-like text the model wrote is escaped, visibly,
// by Seal ([redact.TypedMark]), so that only what Seal wrote is ever
// unsealed (only a model.responded's tool calls are) and a person tells
// the two apart; other payloads may copy text sealed already (a run's
// output, a person's reason), which is left as it is. A payload without
// anything to seal is returned as is.
func (sc *secretScanner) seal(t journal.Type, payload json.RawMessage) json.RawMessage {
	if sc == nil {
		return payload
	}
	switch t {
	case journal.ModelResponded, journal.GateDecided, journal.ToolStarted:
	default:
		sc = &secretScanner{names: sc.names, set: sc.set, refs: sc.refs, again: true}
	}
	var v any
	if decodeJSON(payload, &v) != nil {
		// Not JSON (marshal never writes that): seal the text whole.
		if s := sc.sealText(string(payload)); s != string(payload) {
			b, _ := json.Marshal(s)
			return b
		}
		return payload
	}
	v, changed := sc.sealValue(v)
	if !changed {
		return payload
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("agent: marshal a sealed payload: %v", err))
	}
	return b
}

// sealFresh returns a JSON document derived from a call's unsealed
// arguments sealed as model.responded is: placeholder-like text in it is
// the model's, escaped.
func (sc *secretScanner) sealFresh(doc json.RawMessage) json.RawMessage {
	return sc.seal(journal.ModelResponded, doc)
}

// sealText returns s with the run's secrets replaced by placeholders.
func (sc *secretScanner) sealText(s string) string {
	if sc == nil || (!strings.Contains(s, sealOpen) && len(sc.set.Scan(s)) == 0) {
		return s
	}
	if sc.again {
		if len(sc.set.Scan(s)) == 0 {
			return s
		}
		return sc.set.SealAgain(s, sc.names)
	}
	return sc.set.Seal(s, sc.names)
}

func (sc *secretScanner) sealValue(v any) (any, bool) {
	switch t := v.(type) {
	case string:
		out := sc.sealText(t)
		if strings.Contains(out, `\`) && sc.escapedInside(out) {
			// The arguments spell a secret with JSON escapes: journal
			// them re-encoded, the decoded strings sealed. Unsealed,
			// they are the same JSON value the model wrote.
			var inner any
			if decodeJSON([]byte(t), &inner) == nil {
				inner, _ = sc.sealValue(inner)
				var buf bytes.Buffer
				enc := json.NewEncoder(&buf)
				enc.SetEscapeHTML(false)
				if enc.Encode(inner) == nil {
					return strings.TrimSuffix(buf.String(), "\n"), true
				}
			}
		}
		return out, out != t
	case []any:
		changed := false
		for i := range t {
			var c bool
			t[i], c = sc.sealValue(t[i])
			changed = changed || c
		}
		return t, changed
	case map[string]any:
		changed := false
		out := make(map[string]any, len(t))
		for k, e := range t {
			var c bool
			e, c = sc.sealValue(e)
			nk := sc.sealText(k)
			out[nk] = e
			changed = changed || c || nk != k
		}
		return out, changed
	}
	return v, false
}

// escapedInside reports whether s is a JSON document one of whose
// decoded strings still holds a secret.
func (sc *secretScanner) escapedInside(s string) bool {
	trimmed := strings.TrimSpace(s)
	if trimmed == "" || (trimmed[0] != '{' && trimmed[0] != '[' && trimmed[0] != '"') {
		return false
	}
	var v any
	if decodeJSON([]byte(trimmed), &v) != nil {
		return false
	}
	var found bool
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case string:
			found = found || len(sc.set.Scan(t)) > 0
		case []any:
			for _, e := range t {
				walk(e)
			}
		case map[string]any:
			for k, e := range t {
				walk(k)
				walk(e)
			}
		}
	}
	walk(v)
	return found
}

func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("agent: trailing data after JSON")
	}
	return nil
}

// unseal returns a journaled tool call with the values of the
// placeholders [secretScanner.seal] wrote put back: what the gate
// validates and decides on and the tool runs with. Only the raw
// argument text is unsealed, never a decoded string, so a placeholder
// the model spelled with JSON escapes stays text.
func (sc *secretScanner) unseal(tc model.ToolCall) model.ToolCall {
	if sc != nil {
		tc.Arguments = sc.set.Unseal(tc.Arguments, sc.names)
	}
	return tc
}
