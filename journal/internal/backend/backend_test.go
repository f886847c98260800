package backend

import (
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestSealValidates(t *testing.T) {
	ok := journal.Draft{Type: journal.RunCreated, Time: t0, Payload: []byte(`{"a":1}`)}
	for _, tt := range []struct {
		name    string
		runID   string
		after   int64
		drafts  []journal.Draft
		wantErr string // substring; empty means success
	}{
		{name: "ok", runID: "r", drafts: []journal.Draft{ok, ok}},
		{name: "empty payload is {}", runID: "r", drafts: []journal.Draft{{Type: "x", Time: t0}}},
		{name: "empty run id", drafts: []journal.Draft{ok}, wantErr: "empty run id"},
		{name: "control char in run id", runID: "r\n1", drafts: []journal.Draft{ok}, wantErr: "control character"},
		{name: "invalid UTF-8 run id", runID: "r\xff", drafts: []journal.Draft{ok}, wantErr: "UTF-8"},
		{name: "no drafts", runID: "r", wantErr: "no drafts"},
		{name: "negative after", runID: "r", after: -1, drafts: []journal.Draft{ok}, wantErr: "negative"},
		{name: "empty type", runID: "r", drafts: []journal.Draft{ok, {Time: t0}}, wantErr: "draft 1: empty type"},
		{name: "invalid UTF-8 type", runID: "r", drafts: []journal.Draft{{Type: "a\xff", Time: t0}}, wantErr: "UTF-8"},
		{name: "zero time", runID: "r", drafts: []journal.Draft{{Type: "x"}}, wantErr: "zero time"},
		{name: "year 10000", runID: "r", drafts: []journal.Draft{{Type: "x", Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}, wantErr: "outside"},
		{name: "array payload", runID: "r", drafts: []journal.Draft{{Type: "x", Time: t0, Payload: []byte(` [1]`)}}, wantErr: "not a JSON object"},
		{name: "null payload", runID: "r", drafts: []journal.Draft{{Type: "x", Time: t0, Payload: []byte(`null`)}}, wantErr: "not a JSON object"},
		{name: "broken payload", runID: "r", drafts: []journal.Draft{{Type: "x", Time: t0, Payload: []byte(`{"a"}`)}}, wantErr: "not JSON"},
		{name: "trailing junk", runID: "r", drafts: []journal.Draft{{Type: "x", Time: t0, Payload: []byte(`{} {}`)}}, wantErr: "not JSON"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := Seal(tt.runID, tt.after, journal.GenesisHash, tt.drafts)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Seal = %v", err)
				}
				if err := journal.Verify(tt.runID, evs); err != nil {
					t.Errorf("Verify(Seal(...)) = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Seal = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestSealCopiesPayload(t *testing.T) {
	p := []byte(`{"a":1}`)
	evs, err := Seal("r", 0, journal.GenesisHash, []journal.Draft{{Type: "x", Time: t0, Payload: p}})
	if err != nil {
		t.Fatal(err)
	}
	p[2] = 'b'
	if string(evs[0].Payload) != `{"a":1}` {
		t.Errorf("changing the draft's payload changed the sealed event: %s", evs[0].Payload)
	}
}

func TestBroker(t *testing.T) {
	var b Broker
	b.Publish("nobody") // no subscribers: must not block or panic
	ch1, stop1 := b.Notify("r")
	ch2, stop2 := b.Notify("r")
	other, stopOther := b.Notify("o")
	defer stopOther()
	b.Publish("r")
	b.Publish("r") // lossy: the second wake-up is dropped, not queued
	for i, ch := range []<-chan struct{}{ch1, ch2} {
		select {
		case <-ch:
		default:
			t.Errorf("subscriber %d was not woken", i)
		}
		select {
		case <-ch:
			t.Errorf("subscriber %d has a second pending wake-up", i)
		default:
		}
	}
	select {
	case <-other:
		t.Error("a subscriber of another run was woken")
	default:
	}
	stop1()
	stop1()
	b.Publish("r")
	select {
	case <-ch1:
		t.Error("a stopped subscriber was woken")
	default:
	}
	select {
	case <-ch2:
	default:
		t.Error("the remaining subscriber was not woken")
	}
	stop2()
	if len(b.subs) != 1 {
		t.Errorf("after stopping both subscribers of r, %d runs have subscribers, want 1 (o)", len(b.subs))
	}
}
