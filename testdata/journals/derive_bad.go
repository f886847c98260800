//go:build ignore

// derive_bad.go derives the bad-*.jsonl journals (and newer-unknown-type.jsonl)
// from a recorded one:
//
//	go run testdata/journals/derive_bad.go testdata/journals/v0.1-demo.jsonl
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/keel-run/keel/journal"
)

func main() {
	src, dir := os.Args[1], filepath.Dir(os.Args[1])
	f, err := os.Open(src)
	check(err)
	evs, torn, err := journal.ReadJSONL(f)
	check(err)
	if torn != nil {
		panic("torn")
	}
	cp := func() []journal.Event { return append([]journal.Event(nil), evs...) }
	reseal := func(es []journal.Event) []journal.Event {
		prev := journal.GenesisHash
		for i := range es {
			es[i].Seq = int64(i + 1)
			check(journal.Seal(prev, &es[i]))
			prev = es[i].Hash
		}
		return es
	}
	write := func(name string, es []journal.Event) {
		var b bytes.Buffer
		check(journal.WriteJSONL(&b, es))
		check(os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644))
	}
	find := func(t journal.Type, n int) int {
		for i, e := range evs {
			if e.Type == t {
				if n == 0 {
					return i
				}
				n--
			}
		}
		panic(fmt.Sprint("no ", t))
	}

	// A flipped hash: one hex digit of event 5's stored hash.
	es := cp()
	h := []byte(es[4].Hash)
	if h[10] == '0' {
		h[10] = '1'
	} else {
		h[10] = '0'
	}
	es[4].Hash = string(h)
	write("bad-hash-flipped.jsonl", es)

	// A payload edited after the fact: the tool's output of the first
	// tool.finished says something else; the hash is left as recorded.
	es = cp()
	i := find(journal.ToolFinished, 0)
	es[i].Payload = json.RawMessage(strings.Replace(string(es[i].Payload), `"content":"`, `"content":"all tests passed. `, 1))
	write("bad-payload-edited.jsonl", es)

	// A gap: event 6 deleted.
	es = cp()
	write("bad-gap.jsonl", append(es[:5:5], es[6:]...))

	// Reordered: events 8 and 9 swapped.
	es = cp()
	es[7], es[8] = es[8], es[7]
	write("bad-reordered.jsonl", es)

	// Resealed and foldable: an event type this release does not know (as
	// a newer release may write), inserted after event 3 with a valid
	// chain. The fold skips it (agent.Decode), so newer journals stay
	// readable.
	es = cp()
	x := es[3]
	x.Type, x.Payload = "run.teleported", json.RawMessage(`{"to":"elsewhere"}`)
	es = append(es[:3:3], append([]journal.Event{x}, es[3:]...)...)
	write("newer-unknown-type.jsonl", reseal(es))

	// Resealed but unfoldable: a known event type whose payload does not
	// decode (a call id that is a number).
	es = cp()
	i = find(journal.GateDecided, 0)
	es[i].Payload = json.RawMessage(strings.Replace(string(es[i].Payload), `"call_id":"`, `"call_id":7,"x":"`, 1))
	write("bad-undecodable-payload.jsonl", reseal(es))

	// Resealed but unfoldable: a result for a call nobody made.
	es = cp()
	i = find(journal.ToolFinished, 0)
	x = es[i]
	var p map[string]any
	check(json.Unmarshal(x.Payload, &p))
	p["call_id"] = "call_ghost"
	x.Payload, _ = json.Marshal(p)
	es = append(es[:i+1:i+1], append([]journal.Event{x}, es[i+1:]...)...)
	write("bad-orphan-result.jsonl", reseal(es))

	// Resealed but unfoldable: the run goes on after run.completed.
	es = cp()
	last := es[len(es)-1]
	if last.Type != journal.RunCompleted {
		panic("last is " + last.Type)
	}
	es = append(es, es[find(journal.ModelResponded, 0)])
	write("bad-after-completed.jsonl", reseal(es))

	// A torn tail: the last record cut in the middle, as a crash while
	// writing the file leaves it.
	var b bytes.Buffer
	check(journal.WriteJSONL(&b, evs))
	all := b.Bytes()
	lastLine := bytes.LastIndexByte(all[:len(all)-1], '\n') + 1
	check(os.WriteFile(filepath.Join(dir, "bad-torn-tail.jsonl"), all[:lastLine+(len(all)-lastLine)/2], 0o644))

	// A line in the middle that is not a record.
	lines := bytes.SplitAfter(all, []byte("\n"))
	lines[6] = []byte("{\"run_id\":\"x\",\"seq\":7,\n")
	check(os.WriteFile(filepath.Join(dir, "bad-not-a-record.jsonl"), bytes.Join(lines, nil), 0o644))
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
