package evalrun

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/keel-run/keel/eval"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/service"
)

// EvalParams is what keel eval run asks for.
type EvalParams struct {
	// Home is Keel's home: the evaluation is kept in Home/evals/ID.
	Home string
	// Suite is the suite's path (a case file, a suite.toml, a directory).
	Suite string
	// Sources are OWNER/NAME=DIR: the clones or mirrors of repositories
	// the cases name.
	Sources []string
	// Env is KEY=VALUE added to every case's sandbox environment.
	Env    []string
	Config eval.Config
	// ID is the evaluation's id ("": a new one).
	ID string
	// WorkDir is where trial workspaces are made ("": Home/evals/ID/work,
	// removed afterwards unless Keep).
	WorkDir string
	Keep    bool
}

// Evaluation is an evaluation checked and ready to run.
type Evaluation struct {
	ID, Dir, Work string
	Suite         *eval.Suite
	p             *EvalParams
	root          string
}

// PrepareEval checks p (each refusal is ErrRefused) and loads its
// suite.
func PrepareEval(p *EvalParams) (*Evaluation, error) {
	cfg := &p.Config
	switch cfg.Approve {
	case "deny", "allow":
	default:
		return nil, refusef("--approve %q: want deny or allow", cfg.Approve)
	}
	if cfg.Trials < 1 || cfg.Concurrency < 1 {
		return nil, refusef("--trials and --concurrency want a positive number")
	}
	if cfg.Budget < 0 {
		return nil, refusef("--budget %g: want 0 (no cap) or more dollars", cfg.Budget)
	}
	sources := map[string]string{}
	for _, s := range p.Sources {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" || v == "" {
			return nil, refusef("--source %q: want OWNER/NAME=DIR", s)
		}
		abs, err := filepath.Abs(v)
		if err != nil {
			return nil, refusef("--source %q: %v", s, err)
		}
		sources[k] = abs
	}
	suite, root, err := LoadSuite(p.Suite, sources)
	if err != nil {
		return nil, err
	}
	for _, kv := range p.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, refusef("--env %q: want KEY=VALUE", kv)
		}
	}
	for _, c := range suite.Cases {
		c.Env = append(c.Env, p.Env...)
	}
	if cfg.Model != eval.Recorded {
		if _, err := model.ParseSpec(cfg.Model); err != nil {
			return nil, refusef("--model: %v", err)
		}
	}
	if cfg.Live != "" {
		if cfg.Model != eval.Recorded {
			return nil, refusef("--live takes over from the recordings: it needs --model %s", eval.Recorded)
		}
		if _, err := model.ParseSpec(cfg.Live); err != nil {
			return nil, refusef("--live: %v", err)
		}
	}
	if cfg.Policy != "" {
		if cfg.Policy, err = filepath.Abs(cfg.Policy); err != nil {
			return nil, err
		}
	}
	id := p.ID
	if id == "" {
		id = "ev" + strings.ToLower(ulid.Make().String())[16:]
	} else if !service.ValidEvalID(id) {
		return nil, refusef("--name %q: an evaluation id is letters, digits, '.', '_' and '-' (at most 128), not starting with '.' or '-'", id)
	}
	dir := Dir(p.Home, id)
	if _, err := os.Stat(filepath.Join(dir, "result.json")); err == nil {
		return nil, refusef("evaluation %s exists already (%s): give another --name", id, dir)
	}
	work := p.WorkDir
	if work == "" {
		work = filepath.Join(dir, "work")
	}
	return &Evaluation{ID: id, Dir: dir, Work: work, Suite: suite, p: p, root: root}, nil
}

// Run runs every trial on x, journaled in store (progress is told of
// each), and keeps the result (result.json) and its report
// (report.html) in the evaluation's directory, and in html too when
// not "". passK is k of pass@k (0: the trials).
func (e *Evaluation) Run(ctx context.Context, store journal.Store, x eval.Executor, progress func(*eval.Trial), passK int, html string) (*eval.Report, error) {
	r := &eval.Runner{ID: e.ID, Exec: x, Store: store, Root: e.root, WorkDir: e.Work, Keep: e.p.Keep, Progress: progress}
	res, err := r.Run(ctx, e.Suite, e.p.Config)
	if err != nil {
		return nil, err
	}
	if !e.p.Keep && e.p.WorkDir == "" {
		_ = os.RemoveAll(e.Work) // the trials' workspaces are gone: their cases' directories
	}
	if err := WriteJSON(filepath.Join(e.Dir, "result.json"), res); err != nil {
		return nil, err
	}
	rep := eval.NewReport(res, passK)
	if err := WriteHTML(filepath.Join(e.Dir, "report.html"), nil, rep); err != nil {
		return nil, err
	}
	if html != "" {
		if err := WriteHTML(html, nil, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}
