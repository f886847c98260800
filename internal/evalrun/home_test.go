package evalrun_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/eval"
	"github.com/keel-run/keel/internal/evalrun"
)

// The evaluations kept under a home are listed and read by id; a result
// is found by id, by directory or by file; what is not there, and a
// directory that is not empty, are the caller's fault.
func TestHostAndResults(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	h := evalrun.Host{Home: home}
	if ids, err := h.EvalIDs(); err != nil || len(ids) != 0 {
		t.Fatalf("EvalIDs of a new home = %v, %v", ids, err)
	}
	want := &eval.Result{ID: "ev1", Suite: "s"}
	if err := evalrun.WriteJSON(filepath.Join(evalrun.Dir(home, "ev1"), "result.json"), want); err != nil {
		t.Fatal(err)
	}
	if ids, err := h.EvalIDs(); err != nil || !cmp.Equal(ids, []string{"ev1"}) {
		t.Errorf("EvalIDs = %v, %v; want [ev1]", ids, err)
	}
	got, err := h.EvalResult("ev1")
	if err != nil || got.ID != "ev1" || got.Suite != "s" {
		t.Errorf("EvalResult(ev1) = %+v, %v", got, err)
	}
	for _, ref := range []string{"ev1", evalrun.Dir(home, "ev1"), filepath.Join(evalrun.Dir(home, "ev1"), "result.json")} {
		if got, err := evalrun.LoadResult(home, ref); err != nil || got.ID != "ev1" {
			t.Errorf("LoadResult(%s) = %+v, %v", ref, got, err)
		}
	}
	if _, err := evalrun.LoadResult(home, "nope"); !errors.Is(err, evalrun.ErrRefused) {
		t.Errorf("LoadResult(nope) = %v, want ErrRefused", err)
	}
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := evalrun.EmptyDir(full, "-o"); !errors.Is(err, evalrun.ErrRefused) {
		t.Errorf("EmptyDir(not empty) = %v, want ErrRefused", err)
	}
	if err := evalrun.EmptyDir(filepath.Join(full, "new"), "-o"); err != nil {
		t.Errorf("EmptyDir(missing) = %v", err)
	}
}
