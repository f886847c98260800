package evalrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/keel-run/keel/eval"
)

// Dir is the directory of evaluation id under Keel's home.
func Dir(home, id string) string { return filepath.Join(home, "evals", id) }

// Host is the service's [service.EvalHost]: the evaluations kept under
// Keel's home, one directory each with its result.json.
type Host struct{ Home string }

// EvalIDs lists the evaluations' ids.
func (h Host) EvalIDs() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(h.Home, "evals"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// EvalResult reads evaluation id's result.
func (h Host) EvalResult(id string) (*eval.Result, error) {
	b, err := os.ReadFile(filepath.Join(Dir(h.Home, id), "result.json"))
	if err != nil {
		return nil, err
	}
	var res eval.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("result.json: %w", err)
	}
	return &res, nil
}

// LoadResult reads an evaluation's result: ref is an id under home, a
// directory holding result.json or a result.json file.
func LoadResult(home, ref string) (*eval.Result, error) {
	p := ref
	if st, err := os.Stat(p); err != nil || st.IsDir() {
		if err == nil && st.IsDir() {
			p = filepath.Join(p, "result.json")
		} else {
			p = filepath.Join(Dir(home, ref), "result.json")
		}
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) && !strings.ContainsRune(ref, filepath.Separator) && !strings.HasSuffix(ref, ".json") {
		// An id, not a path: said as the API says it, without Keel's
		// files.
		return nil, refusef("no evaluation %s", ref)
	}
	if err != nil {
		return nil, refusef("evaluation %s: %v", ref, err)
	}
	var res eval.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("evaluation %s: %s: %w", ref, p, err)
	}
	return &res, nil
}

// WriteJSON writes v as indented JSON to path, aside and renamed into
// place: a server listing evaluations never reads half a result.
func WriteJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".result-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// WriteHTML writes the HTML report of reps (and their comparison c, if
// set) to path.
func WriteHTML(path string, c *eval.Comparison, reps ...*eval.Report) error {
	var b bytes.Buffer
	if err := eval.WriteHTML(&b, c, reps...); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// LoadSuite loads the suite at path (a suite file, or a directory with
// suite.toml or case directories), cloning cases' repositories from
// sources (OWNER/NAME → directory) where they name one. It returns the
// suite and the directory its cases are relative to.
func LoadSuite(path string, sources map[string]string) (*eval.Suite, string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", refusef("%s: %v", path, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, "", refusef("eval: suite %s: %v", path, err)
	}
	root, name := filepath.Dir(abs), filepath.Base(abs)
	if st.IsDir() {
		root, name = abs, "."
	}
	lo := &eval.LoadOptions{Sources: sources}
	if name == "." {
		lo.Name = filepath.Base(root)
		if st, err := os.Stat(filepath.Join(root, "suite.toml")); err == nil && !st.IsDir() {
			lo.Name = "" // the suite file's name, if it gives one
		}
	}
	suite, err := eval.Load(os.DirFS(root), name, lo)
	if err != nil {
		return nil, "", refusef("%v", err)
	}
	return suite, root, nil
}
