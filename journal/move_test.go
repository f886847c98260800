package journal_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

func TestImport(t *testing.T) {
	ctx := t.Context()
	src := mem.New()
	var after int64
	for i, typ := range []journal.Type{journal.RunCreated, journal.ModelResponded, journal.ToolStarted, journal.ToolFinished, journal.RunCompleted} {
		if _, err := src.Append(ctx, "r", after, journal.Draft{Type: typ, Time: time.Unix(int64(i), int64(i)), Payload: []byte(`{"n":"\u00e9 ` + string(rune('a'+i)) + `"}`)}); err != nil {
			t.Fatal(err)
		}
		after++
	}
	evs, _ := journal.ReadVerified(ctx, src, "r")
	// Through the export format, as `keel runs export | keel runs import`.
	var buf bytes.Buffer
	if err := journal.WriteJSONL(&buf, evs); err != nil {
		t.Fatal(err)
	}
	read, torn, err := journal.ReadJSONL(&buf)
	if err != nil || torn != nil {
		t.Fatal(err, torn)
	}
	dst := mem.New()
	// A prefix already there (an import cut short earlier) gets the rest.
	if _, err := journal.Import(ctx, dst, read[:2]); err != nil {
		t.Fatal(err)
	}
	if ok, err := journal.Import(ctx, dst, read); !ok || err != nil {
		t.Fatalf("Import = %t, %v", ok, err)
	}
	got, err := journal.ReadVerified(ctx, dst, "r")
	if err != nil || len(got) != 5 || got[4].Hash != evs[4].Hash {
		t.Fatalf("imported %d events, %v", len(got), err)
	}
	if ok, err := journal.Import(ctx, dst, read); ok || err != nil {
		t.Errorf("second Import = %t, %v; want false, nil", ok, err)
	}
	// A different run under the same id is refused.
	other := mem.New()
	other.Append(ctx, "r", 0, journal.Draft{Type: journal.RunCreated, Time: time.Unix(9, 0), Payload: []byte(`{}`)})
	if _, err := journal.Import(ctx, other, read); !errors.Is(err, journal.ErrExists) {
		t.Errorf("Import over another run = %v, want ErrExists", err)
	}
	// A tampered event is refused before anything is stored.
	bad := append([]journal.Event(nil), read...)
	bad[2].Payload = []byte(`{"n":"x"}`)
	fresh := mem.New()
	var ce *journal.CorruptError
	if _, err := journal.Import(ctx, fresh, bad); !errors.As(err, &ce) || ce.Seq != 3 {
		t.Errorf("Import of a tampered run = %v, want corrupt at 3", err)
	}
	if _, err := fresh.Read(ctx, "r", 1); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("a refused import stored something: %v", err)
	}
}

// Several runs of one export: split by run, read back in order, and a
// tampered one stores none of them.
func TestImportRuns(t *testing.T) {
	ctx := t.Context()
	src := mem.New()
	for _, id := range []string{"a", "b"} {
		for i, typ := range []journal.Type{journal.RunCreated, journal.RunCompleted} {
			if _, err := src.Append(ctx, id, int64(i), journal.Draft{Type: typ, Time: time.Unix(int64(i), 0), Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	evs, err := journal.ReadRuns(ctx, src, "b", "a")
	if err != nil || len(evs) != 4 || evs[0].RunID != "b" || evs[2].RunID != "a" {
		t.Fatalf("ReadRuns = %d events, %v", len(evs), err)
	}
	if _, err := journal.ReadRuns(ctx, src, "a", "zz"); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("ReadRuns of a missing run = %v", err)
	}
	runs, err := journal.SplitRuns(evs)
	if err != nil || len(runs) != 2 || runs[0][0].RunID != "b" || len(runs[1]) != 2 {
		t.Fatalf("SplitRuns = %v, %v", runs, err)
	}
	if _, err := journal.SplitRuns([]journal.Event{{RunID: journal.SystemPrefix + "memory"}}); err == nil {
		t.Error("SplitRuns took a system stream")
	}
	bad := [][]journal.Event{runs[0], append([]journal.Event(nil), runs[1]...)}
	bad[1][1].Payload = []byte(`{"x":1}`)
	dst := mem.New()
	if stored, err := journal.ImportRuns(ctx, dst, bad); stored != nil || err == nil {
		t.Fatalf("ImportRuns of a tampered run = %v, %v", stored, err)
	}
	if _, err := dst.Read(ctx, "b", 1); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("a refused import stored the good run: %v", err)
	}
	if stored, err := journal.ImportRuns(ctx, dst, runs); err != nil || len(stored) != 2 || !stored[0] || !stored[1] {
		t.Errorf("ImportRuns = %v, %v", stored, err)
	}
	if stored, err := journal.ImportRuns(ctx, dst, runs); err != nil || stored[0] || stored[1] {
		t.Errorf("second ImportRuns = %v, %v; want nothing stored", stored, err)
	}
}
