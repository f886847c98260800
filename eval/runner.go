package eval

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/journal"
)

// Config is what an evaluation varies: the model, the policy and how
// asks are decided, and how many trials of each case run.
type Config struct {
	// Name labels the configuration (default: the model and policy).
	Name string `json:"name"`
	// Model is a model spec, or "recorded": each case's recordings.
	Model string `json:"model"`
	// Live, with Model "recorded", is the model spec that answers from
	// the first divergence from the recording on (recorded-then-live).
	Live string `json:"live,omitempty"`
	// Policy names the policy file the runs use ("" for the default).
	Policy string `json:"policy,omitempty"`
	// Approve decides what a run asks: "deny" (the default) or "allow".
	Approve string `json:"approve,omitempty"`
	// Trials per case (default 1), Concurrency trials at once (default
	// 1), Retries of a trial after an infrastructure error (default 2).
	Trials      int `json:"trials"`
	Concurrency int `json:"concurrency"`
	Retries     int `json:"retries"`
	// Budget, when positive, is the dollars the whole evaluation may
	// spend: each run's cost limit is what remains when it starts, and no
	// trial starts once it is spent.
	Budget float64 `json:"budget,omitempty"`
	// MaxSteps bounds each run (0: the case's, else Keel's default).
	MaxSteps int `json:"max_steps,omitempty"`
}

// Recorded is the model of [Config] that replays each case's recordings.
const Recorded = "recorded"

// Executor creates and executes one trial's run: a normal journaled run
// of the case's task in the prepared workspace, labelled with t.Labels.
// It calls t.After with a [Shell] on the run's sandbox once the run has
// ended, before the sandbox stops. An error is the infrastructure's (the
// run could not be created, wired or executed); runID is "" when no run
// was created. Execute is called from several goroutines at once.
type Executor interface {
	Execute(ctx context.Context, t *TrialRun) (runID string, err error)
}

// Shell runs script with bash in the run's sandbox, in the workspace,
// and returns its exit status and combined output (bounded). An error
// means the sandbox could not run it.
type Shell func(ctx context.Context, script string, timeout time.Duration) (exitCode int, output string, err error)

// TrialRun is one attempt of one trial, as the [Executor] gets it.
type TrialRun struct {
	Case *Case
	// Workspace is the host directory prepared for the run.
	Workspace string
	// Model is the model spec of the run (a recording: "replay:PATH");
	// Live the model that takes over from the first divergence from the
	// recording ("" for none).
	Model, Live string
	// Labels tag the run (eval.id, eval.suite, eval.case, eval.trial,
	// eval.attempt, eval.config).
	Labels map[string]string
	// MaxCost, when positive, is the run's cost limit (the budget left).
	MaxCost float64
	// MaxSteps, when positive, is the run's step limit.
	MaxSteps int
	// Trial and Attempt count from 1; Seq counts every attempt of the
	// evaluation from 1, in the order they start.
	Trial, Attempt, Seq int
	// After runs the checks; the executor calls it with the run's
	// sandbox.
	After func(ctx context.Context, sh Shell) error
}

// Runner runs a suite's trials.
type Runner struct {
	// ID names the evaluation (label eval.id of every run).
	ID string
	// Exec executes the runs; Store is the journal they are in.
	Exec  Executor
	Store journal.Store
	// Root is the host directory of the suite's file system: recordings,
	// files directories and relative git paths are under it.
	Root string
	// WorkDir is where workspaces are made (one directory per attempt);
	// Keep leaves them there after the checks.
	WorkDir string
	Keep    bool
	// Progress, if set, is called after each attempt (from several
	// goroutines, never at once).
	Progress func(*Trial)
}

// Result is an evaluation: its configuration and every trial.
type Result struct {
	ID       string    `json:"id"`
	Suite    string    `json:"suite"`
	Config   Config    `json:"config"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Cases    []string  `json:"cases"`
	Trials   []*Trial  `json:"trials"`
	// Spent is the dollars the trials' runs cost.
	Spent float64 `json:"spent"`
}

// Trial is one trial of one case: its final attempt, and the attempts
// before it that failed on the infrastructure.
type Trial struct {
	Case    string        `json:"case"`
	Trial   int           `json:"trial"`
	Attempt int           `json:"attempt"`
	RunID   string        `json:"run_id,omitempty"`
	Verdict Verdict       `json:"verdict"`
	Usage   *Usage        `json:"usage,omitempty"`
	Checks  []CheckResult `json:"checks,omitempty"`
	// Error says what failed when Verdict is Infra or Skipped.
	Error string `json:"error,omitempty"`
	// Expected is the case's expected verdict (a frozen run's), if any.
	Expected string `json:"expected,omitempty"`
	// Retried are the earlier attempts of this trial that failed on the
	// infrastructure.
	Retried []*Trial `json:"retried,omitempty"`
}

// CheckResult is one check of a trial.
type CheckResult struct {
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
	// Detail says why it failed (exit status, the tests not reported
	// passed, the first differing line).
	Detail string `json:"detail,omitempty"`
	// Output is the end of a Run check's output.
	Output string `json:"output,omitempty"`
}

// Run runs every case of s cfg.Trials times and returns the result. It
// returns an error only when the evaluation could not start; a trial's
// failures, of any kind, are in its [Trial].
func (r *Runner) Run(ctx context.Context, s *Suite, cfg Config) (*Result, error) {
	if cfg.Trials <= 0 {
		cfg.Trials = 1
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Retries < 0 {
		cfg.Retries = 0
	}
	if cfg.Approve == "" {
		cfg.Approve = "deny"
	}
	if cfg.Live != "" && cfg.Model != Recorded {
		return nil, fmt.Errorf("eval: a live model takes over from a recording: it needs model %q", Recorded)
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Model
		if cfg.Live != "" {
			cfg.Name += " then " + cfg.Live
		}
		if cfg.Policy != "" {
			cfg.Name += "+" + filepath.Base(cfg.Policy)
		}
	}
	for _, c := range s.Cases {
		if cfg.Model == Recorded && len(c.Recordings) == 0 {
			return nil, fmt.Errorf("eval: case %s has no recording for --model %s", c.Name, Recorded)
		}
	}
	if err := os.MkdirAll(r.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	res := &Result{ID: r.ID, Suite: s.Name, Config: cfg, Started: time.Now().UTC()}
	type job struct {
		c     *Case
		trial int
		out   *Trial
	}
	var jobs []*job
	for _, c := range s.Cases {
		res.Cases = append(res.Cases, c.Name)
		for t := 1; t <= cfg.Trials; t++ {
			j := &job{c: c, trial: t}
			jobs = append(jobs, j)
		}
	}
	var (
		mu    sync.Mutex
		seq   int
		spent float64
		wg    sync.WaitGroup
		next  = make(chan *job)
		pmu   sync.Mutex
	)
	// budgetLeft reserves the next attempt's number and says what the
	// budget leaves (ok false: nothing).
	budgetLeft := func() (n int, left float64, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if cfg.Budget > 0 && spent >= cfg.Budget {
			return 0, 0, false
		}
		seq++
		if cfg.Budget > 0 {
			left = cfg.Budget - spent
		}
		return seq, left, true
	}
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				var retried []*Trial
				for attempt := 1; ; attempt++ {
					n, left, ok := budgetLeft()
					if !ok {
						j.out = &Trial{Case: j.c.Name, Trial: j.trial, Attempt: attempt, Verdict: Skipped, Error: "the evaluation's budget was spent", Retried: retried}
						break
					}
					t := r.attempt(ctx, s, cfg, j.c, j.trial, attempt, n, left)
					if t.Usage != nil {
						mu.Lock()
						spent += t.Usage.Cost
						mu.Unlock()
					}
					if r.Progress != nil {
						pmu.Lock()
						r.Progress(t)
						pmu.Unlock()
					}
					if t.Verdict == Infra && attempt <= cfg.Retries && ctx.Err() == nil {
						retried = append(retried, t)
						continue
					}
					t.Retried = retried
					j.out = t
					break
				}
			}
		}()
	}
	for _, j := range jobs {
		select {
		case next <- j:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	for _, j := range jobs {
		if j.out == nil {
			j.out = &Trial{Case: j.c.Name, Trial: j.trial, Verdict: Skipped, Error: "the evaluation was stopped"}
		}
		res.Trials = append(res.Trials, j.out)
	}
	res.Spent = spent
	res.Finished = time.Now().UTC()
	return res, nil
}

// attempt runs one attempt of a trial.
func (r *Runner) attempt(ctx context.Context, s *Suite, cfg Config, c *Case, trial, attempt, seq int, left float64) *Trial {
	t := &Trial{Case: c.Name, Trial: trial, Attempt: attempt, Expected: c.Expect}
	ws := filepath.Join(r.WorkDir, safeName(c.Name), fmt.Sprintf("t%d-a%d", trial, attempt))
	if err := r.prepare(ctx, c, ws); err != nil {
		t.Verdict, t.Error = Infra, "workspace: "+err.Error()
		return t
	}
	if !r.Keep {
		defer os.RemoveAll(ws)
	}
	spec := cfg.Model
	if spec == Recorded {
		rec := c.Recordings[(trial-1)%len(c.Recordings)]
		spec = "replay:" + r.hostPath(c, rec)
	}
	live := ""
	if cfg.Model == Recorded {
		live = cfg.Live
	}
	steps := cfg.MaxSteps
	if steps == 0 {
		steps = c.MaxSteps
	}
	tr := &TrialRun{Case: c, Workspace: ws, Model: spec, Live: live, MaxCost: left, MaxSteps: steps, Trial: trial, Attempt: attempt, Seq: seq,
		Labels: map[string]string{"eval.id": r.ID, "eval.suite": s.Name, "eval.case": c.Name, "eval.trial": strconv.Itoa(trial),
			"eval.attempt": strconv.Itoa(attempt), "eval.config": cfg.Name}}
	var checkErr error
	checked := false
	tr.After = func(ctx context.Context, sh Shell) error {
		checked = true
		t.Checks, checkErr = RunChecks(ctx, c, ws, sh)
		return checkErr
	}
	runID, err := r.Exec.Execute(ctx, tr)
	t.RunID = runID
	if runID != "" {
		evs, rerr := r.Store.Read(context.WithoutCancel(ctx), runID, 1)
		if rerr == nil {
			t.Usage, rerr = Measure(evs)
		}
		if rerr != nil && err == nil {
			err = rerr
		}
	}
	switch {
	case err != nil:
		t.Verdict, t.Error = Infra, err.Error()
	case checkErr != nil:
		t.Verdict, t.Error = Infra, "checks: "+checkErr.Error()
	case t.Usage == nil:
		t.Verdict, t.Error = Infra, "no run was journaled"
	default:
		ok := checked
		for _, cr := range t.Checks {
			ok = ok && cr.Passed
		}
		t.Verdict = Classify(t.Usage, ok)
		if t.Verdict == Infra {
			t.Error = t.Usage.Infra
			if t.Error == "" {
				t.Error = "the run ended " + t.Usage.Status + " (" + t.Usage.Reason + ")"
			}
		}
	}
	return t
}

func (r *Runner) hostPath(c *Case, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(r.Root, filepath.FromSlash(c.Root), filepath.FromSlash(p))
}

// prepare makes the workspace of an attempt: a clone of the case's
// repository at its commit, and/or its files.
func (r *Runner) prepare(ctx context.Context, c *Case, ws string) error {
	if err := os.RemoveAll(ws); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(ws), 0o755); err != nil {
		return err
	}
	if g := c.Workspace.Git; g != "" {
		if !strings.Contains(g, "://") && !strings.HasPrefix(g, "git@") {
			g = r.hostPath(c, g)
		}
		if err := git(ctx, "", "clone", "-q", "--no-checkout", g, ws); err != nil {
			return err
		}
		rev := c.Workspace.Commit
		if rev == "" {
			rev = "HEAD"
		}
		if err := git(ctx, ws, "checkout", "-q", "--detach", rev); err != nil {
			return err
		}
	} else if err := os.MkdirAll(ws, 0o755); err != nil {
		return err
	}
	if f := c.Workspace.Files; f != "" {
		if err := copyTree(r.hostPath(c, f), ws); err != nil {
			return err
		}
	}
	return nil
}

func git(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// copyTree copies the regular files and directories of src into dst
// (symbolic links are copied as links; the Harbor image's Dockerfile and
// compose file are left out).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case rel == "Dockerfile" || rel == "docker-compose.yaml" || rel == "docker-compose.yml":
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, target)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, info.Mode().Perm())
		}
		return nil
	})
}

var unsafeChars = lazy.Regexp(`[^A-Za-z0-9._-]+`)

func safeName(s string) string { return unsafeChars().ReplaceAllString(s, "_") }

// PatchCommand prints a workspace's changes for a patch check: new
// files are added to git's index as intents, so that they are in the
// diff, as in a submitted patch.
const PatchCommand = "git add -A -N . && git -c core.quotepath=off diff"

// checkDir is the workspace directory of the checks' files.
const checkDir = ".keel-eval"

// DefaultCheckTimeout bounds a Run check that sets no timeout.
const DefaultCheckTimeout = 10 * time.Minute

// RunChecks runs c's checks in the workspace ws (host path) through sh,
// in order, every one of them.
// The error is the sandbox's (a check that could not run).
//
// The workspace is the agent's: whatever it left in .keel-eval/ (a
// reward.txt written in advance, a link to a file of the host) is
// removed before the first check, and the checks' files are written
// through an [os.Root] of the workspace, which no link leaves.
func RunChecks(ctx context.Context, c *Case, ws string, sh Shell) ([]CheckResult, error) {
	root, err := os.OpenRoot(ws)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if err := root.RemoveAll(checkDir); err != nil {
		return nil, fmt.Errorf("eval: remove the workspace's %s: %w", checkDir, err)
	}
	var out []CheckResult
	for i := range c.Checks {
		ch := &c.Checks[i]
		cr := CheckResult{Name: ch.Label()}
		switch {
		case ch.Run != "":
			if len(ch.Files) > 0 {
				if err := root.MkdirAll(checkDir, 0o755); err != nil {
					return out, err
				}
				for name, content := range ch.Files {
					if err := root.WriteFile(path.Join(checkDir, name), []byte(content), 0o644); err != nil {
						return out, err
					}
				}
			}
			timeout := time.Duration(ch.Timeout)
			if timeout <= 0 {
				timeout = DefaultCheckTimeout
			}
			code, output, err := sh(ctx, ch.Run, timeout)
			if err != nil {
				return out, fmt.Errorf("check %s: %w", cr.Name, err)
			}
			cr.Output = tail(output, 4000)
			missing := notPassed(output, ch.Passed)
			switch {
			case code != 0 && !ch.AnyExit:
				cr.Detail = fmt.Sprintf("exit status %d", code)
			case len(missing) > 0:
				cr.Detail = fmt.Sprintf("%d of %d tests not reported passed: %s", len(missing), len(ch.Passed), strings.Join(head(missing, 5), ", "))
			default:
				cr.Passed = true
			}
		case ch.File != "":
			cr.Passed, cr.Detail = fileCheck(ws, ch)
		case ch.Patch != "":
			code, output, err := sh(ctx, PatchCommand, time.Minute)
			if err != nil {
				return out, fmt.Errorf("check %s: %w", cr.Name, err)
			}
			if code != 0 {
				cr.Detail = fmt.Sprintf("git diff: exit status %d: %s", code, oneLine(output, 200))
				break
			}
			cr.Passed, cr.Detail = samePatch(ch.Patch, output)
		}
		out = append(out, cr)
	}
	return out, nil
}

func fileCheck(ws string, ch *Check) (bool, string) {
	root, err := os.OpenRoot(ws)
	if err != nil {
		return false, err.Error()
	}
	defer root.Close()
	b, err := root.ReadFile(filepath.FromSlash(ch.File))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, "missing"
	case err != nil:
		return false, err.Error()
	case ch.Equals != "" && string(b) != ch.Equals:
		return false, fmt.Sprintf("content differs (%d bytes, want %d)", len(b), len(ch.Equals))
	case ch.Contains != "" && !strings.Contains(string(b), ch.Contains):
		return false, fmt.Sprintf("does not contain %q", oneLine(ch.Contains, 60))
	}
	return true, ""
}

// samePatch compares two unified diffs, ignoring "index " lines and
// trailing white space.
func samePatch(want, got string) (bool, string) {
	norm := func(s string) []string {
		var lines []string
		for l := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
			if strings.HasPrefix(l, "index ") {
				continue
			}
			lines = append(lines, strings.TrimRight(l, " \t\r"))
		}
		return lines
	}
	w, g := norm(want), norm(got)
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return false, fmt.Sprintf("line %d: want %q, got %q", i+1, oneLine(a, 80), oneLine(b, 80))
		}
	}
	return true, ""
}

// notPassed returns the ids of want that output does not report passed.
func notPassed(output string, want []string) []string {
	if len(want) == 0 {
		return nil
	}
	passed := map[string]bool{}
	for l := range strings.SplitSeq(output, "\n") {
		l = strings.TrimSpace(l)
		if id, ok := strings.CutPrefix(l, "PASSED "); ok {
			// pytest -rA: "PASSED id" or "PASSED id - message".
			passed[id] = true
			if i := strings.Index(id, " - "); i > 0 {
				passed[id[:i]] = true
			}
		} else if id, ok := strings.CutSuffix(l, " PASSED"); ok {
			passed[id] = true
		} else if i := strings.Index(l, " PASSED "); i > 0 {
			passed[l[:i]] = true // pytest -v: "id PASSED [ 10%]"
		}
	}
	// SWE-bench's log parser keeps a test id up to its first space
	// ("test_x[a-Missing data.]" is listed as "test_x[a-Missing"): an id
	// so cut matches too.
	for id := range passed {
		if f := strings.Fields(id); len(f) > 1 {
			passed[f[0]] = true
		}
	}
	var missing []string
	for _, id := range want {
		if !passed[id] {
			missing = append(missing, id)
		}
	}
	return missing
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

func head(xs []string, n int) []string {
	if len(xs) <= n {
		return xs
	}
	return append(xs[:n:n], fmt.Sprintf("and %d more", len(xs)-n))
}
