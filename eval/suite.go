package eval

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Suite is a named set of cases.
type Suite struct {
	Name  string
	Cases []*Case
}

// Case is one task with the workspace it starts from and the checks that
// decide whether a trial succeeded.
type Case struct {
	// Name identifies the case in its suite (unique).
	Name string `toml:"name,omitempty" json:"name"`
	// Task is what the agent is asked; with a recorded model it may be
	// empty (the recording's task is used).
	Task string `toml:"task,omitempty" json:"task,omitempty"`
	// System replaces Keel's system prompt when set.
	System string `toml:"system,omitempty" json:"system,omitempty"`
	// Workspace is where the trial starts.
	Workspace Workspace `toml:"workspace,omitempty" json:"workspace"`
	// Setup is a shell script run in the sandbox before the agent starts;
	// Env are KEY=VALUE entries of the sandbox.
	Setup string   `toml:"setup,omitempty" json:"setup,omitempty"`
	Env   []string `toml:"env,omitempty" json:"env,omitempty"`
	// Recordings are trajectory files (paths in the suite's file system)
	// a recorded model answers from; trial t uses Recordings[t mod n].
	Recordings []string `toml:"recordings,omitempty" json:"recordings,omitempty"`
	// MaxSteps and Timeout bound a trial (0: the configuration's).
	MaxSteps int      `toml:"max_steps,omitempty" json:"max_steps,omitempty"`
	Timeout  Duration `toml:"timeout,omitempty" json:"timeout,omitempty"`
	// Checks decide success: every check must pass.
	Checks []Check `toml:"check,omitempty" json:"checks"`
	// Expect, when set ("pass" or "fail"), is the verdict a frozen run had.
	Expect string `toml:"expect,omitempty" json:"expect,omitempty"`
	// Source names where the case came from (a file, an instance id).
	Source string `toml:"-" json:"source,omitempty"`
	// Root is the directory of the case's own files in the suite's file
	// system ("" for the root); relative paths of the case are under it.
	Root string `toml:"-" json:"-"`
}

// Workspace is where a trial starts: a git repository (a path or URL) at
// a commit, and/or a directory whose files are copied in.
type Workspace struct {
	// Git is a repository to clone (a path on this machine, absolute or
	// relative to the case, or a URL); Repo names it for a source map
	// (owner/name), used when Git is empty.
	Git  string `toml:"git,omitempty" json:"git,omitempty"`
	Repo string `toml:"repo,omitempty" json:"repo,omitempty"`
	// Commit is checked out after the clone ("" keeps the default branch).
	Commit string `toml:"commit,omitempty" json:"commit,omitempty"`
	// Files is a directory of the case whose files are copied over the
	// clone (or make the workspace alone).
	Files string `toml:"files,omitempty" json:"files,omitempty"`
	// MountPath is where the sandbox shows the workspace ("" means Keel's
	// default, /workspace).
	MountPath string `toml:"mount_path,omitempty" json:"mount_path,omitempty"`
}

// Check is one condition of success, run after the agent's run. Exactly
// one of Run, File and Patch is set.
type Check struct {
	// Name labels the check in reports (default: its kind and subject).
	Name string `toml:"name,omitempty" json:"name,omitempty"`
	// Run is a shell script run in the run's sandbox, in the workspace;
	// it passes when it exits 0 and its output reports every test in
	// Passed as passed (a line "PASSED ID" or "ID PASSED", pytest -rA and
	// verbose forms).
	Run    string   `toml:"run,omitempty" json:"run,omitempty"`
	Passed []string `toml:"passed,omitempty" json:"passed,omitempty"`
	// AnyExit lets a Run check pass whatever its exit status (the Passed
	// list decides).
	AnyExit bool `toml:"any_exit,omitempty" json:"any_exit,omitempty"`
	// Files are written into the workspace's .keel-eval/ directory before
	// Run runs (name → content), e.g. a test patch to apply.
	Files map[string]string `toml:"files,omitempty" json:"files,omitempty"`
	// File is a workspace path that must exist; with Equals or Contains
	// its content must equal or contain that text.
	File     string `toml:"file,omitempty" json:"file,omitempty"`
	Equals   string `toml:"equals,omitempty" json:"equals,omitempty"`
	Contains string `toml:"contains,omitempty" json:"contains,omitempty"`
	// Patch is the expected `git diff` of the workspace, new files
	// included ([PatchCommand]; lines starting "index " are ignored, as
	// is trailing white space).
	Patch string `toml:"patch,omitempty" json:"patch,omitempty"`
	// Timeout bounds a Run check (default 10 minutes).
	Timeout Duration `toml:"timeout,omitempty" json:"timeout,omitempty"`
}

// Label is the check's name in reports.
func (c *Check) Label() string {
	switch {
	case c.Name != "":
		return c.Name
	case c.Run != "":
		return "run: " + oneLine(c.Run, 60)
	case c.File != "":
		return "file: " + c.File
	case c.Patch != "":
		return "patch"
	}
	return "check"
}

func (c *Check) validate() error {
	n := 0
	for _, s := range []string{c.Run, c.File, c.Patch} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("check %q: want exactly one of run, file and patch", c.Label())
	}
	if (c.Equals != "" || c.Contains != "") && c.File == "" {
		return fmt.Errorf("check %q: equals and contains go with file", c.Label())
	}
	for name := range c.Files {
		if name == "" || strings.Contains(name, "/") || strings.HasPrefix(name, ".") {
			return fmt.Errorf("check %q: file name %q: want a plain name", c.Label(), name)
		}
	}
	return nil
}

// Duration is a time.Duration read from TOML and JSON as "30s", "10m".
type Duration time.Duration

// UnmarshalText reads "90s", "10m".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as Go prints it.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// suiteFile is suite.toml: a name, defaults for every case, sources of
// repositories by name, and cases inline.
type suiteFile struct {
	Name     string            `toml:"name"`
	Defaults caseDefaults      `toml:"defaults"`
	Sources  map[string]string `toml:"sources"`
	Cases    []*Case           `toml:"case"`
}

// caseDefaults apply to every case of a suite that does not set them.
type caseDefaults struct {
	Setup     string   `toml:"setup"`
	Env       []string `toml:"env"`
	MountPath string   `toml:"mount_path"`
	MaxSteps  int      `toml:"max_steps"`
	Timeout   Duration `toml:"timeout"`
}

// LoadOptions configure [Load].
type LoadOptions struct {
	// Sources map a repository name (owner/name) to a clone or mirror
	// on this machine, for cases that name a repository but no git path
	// (SWE-bench instances); they override the suite file's.
	Sources map[string]string
	// Name overrides the suite's name.
	Name string
}

// Load reads the suite at name in fsys: a case file (TOML), a suite.toml,
// or a directory. A directory is one case when it holds case.toml, a
// SWE-bench instance (spec.json) or a Harbor task (task.toml); otherwise
// its suite.toml (if any), its *.toml case files and each subdirectory
// that is a case make the suite. Case names must be unique; a case
// without checks is refused (its verdict would mean nothing).
func Load(fsys fs.FS, name string, opts *LoadOptions) (*Suite, error) {
	if opts == nil {
		opts = &LoadOptions{}
	}
	name = path.Clean(name)
	s := &Suite{Name: path.Base(name)}
	if name == "." {
		s.Name = "suite"
	}
	var sf suiteFile
	st, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("eval: suite %s: %w", name, err)
	}
	dir := name
	if !st.IsDir() {
		dir = path.Dir(name)
		if path.Base(name) == "suite.toml" {
			if err := decodeTOML(fsys, name, &sf); err != nil {
				return nil, err
			}
			if err := s.addInline(&sf, dir); err != nil {
				return nil, err
			}
		} else {
			c, err := loadCaseFile(fsys, name)
			if err != nil {
				return nil, err
			}
			s.Name = c.Name
			s.Cases = append(s.Cases, c)
		}
	} else if c, err := loadCaseDir(fsys, dir); err != nil {
		return nil, err
	} else if c != nil {
		s.Name = c.Name
		s.Cases = append(s.Cases, c)
	} else {
		if _, err := fs.Stat(fsys, path.Join(dir, "suite.toml")); err == nil {
			if err := decodeTOML(fsys, path.Join(dir, "suite.toml"), &sf); err != nil {
				return nil, err
			}
			if err := s.addInline(&sf, dir); err != nil {
				return nil, err
			}
		}
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			return nil, fmt.Errorf("eval: suite %s: %w", name, err)
		}
		for _, e := range entries {
			p := path.Join(dir, e.Name())
			switch {
			case strings.HasPrefix(e.Name(), "."):
			case e.IsDir():
				c, err := loadCaseDir(fsys, p)
				if err != nil {
					return nil, err
				}
				if c != nil {
					s.Cases = append(s.Cases, c)
				}
			case strings.HasSuffix(e.Name(), ".toml") && e.Name() != "suite.toml":
				c, err := loadCaseFile(fsys, p)
				if err != nil {
					return nil, err
				}
				s.Cases = append(s.Cases, c)
			}
		}
	}
	if sf.Name != "" {
		s.Name = sf.Name
	}
	if opts.Name != "" {
		s.Name = opts.Name
	}
	sources := map[string]string{}
	for k, v := range sf.Sources {
		sources[k] = v
	}
	for k, v := range opts.Sources {
		sources[k] = v
	}
	if len(s.Cases) == 0 {
		return nil, fmt.Errorf("eval: suite %s has no cases (case files *.toml, case.toml, spec.json or task.toml directories)", name)
	}
	seen := map[string]bool{}
	for _, c := range s.Cases {
		applyDefaults(c, &sf.Defaults)
		if c.Workspace.Git == "" && c.Workspace.Repo != "" {
			c.Workspace.Git = sources[c.Workspace.Repo]
		}
		if err := c.validate(); err != nil {
			return nil, fmt.Errorf("eval: suite %s: %w", name, err)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("eval: suite %s: two cases are named %q", name, c.Name)
		}
		seen[c.Name] = true
	}
	slices.SortFunc(s.Cases, func(a, b *Case) int { return strings.Compare(a.Name, b.Name) })
	return s, nil
}

func (s *Suite) addInline(sf *suiteFile, dir string) error {
	for i, c := range sf.Cases {
		if c.Name == "" {
			return fmt.Errorf("eval: %s: case %d has no name", path.Join(dir, "suite.toml"), i+1)
		}
		c.Root = dir
		c.Source = path.Join(dir, "suite.toml")
		s.Cases = append(s.Cases, c)
	}
	return nil
}

func applyDefaults(c *Case, d *caseDefaults) {
	if c.Setup == "" {
		c.Setup = d.Setup
	}
	if len(c.Env) == 0 {
		c.Env = d.Env
	} else if len(d.Env) > 0 {
		c.Env = append(append([]string(nil), d.Env...), c.Env...)
	}
	if c.Workspace.MountPath == "" {
		c.Workspace.MountPath = d.MountPath
	}
	if c.MaxSteps == 0 {
		c.MaxSteps = d.MaxSteps
	}
	if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
}

func (c *Case) validate() error {
	if c.Name == "" {
		return errors.New("a case has no name")
	}
	if strings.TrimSpace(c.Task) == "" && len(c.Recordings) == 0 {
		return fmt.Errorf("case %s: no task (and no recording to take it from)", c.Name)
	}
	if len(c.Checks) == 0 {
		return fmt.Errorf("case %s: no checks: a trial's verdict would mean nothing", c.Name)
	}
	for i := range c.Checks {
		if err := c.Checks[i].validate(); err != nil {
			return fmt.Errorf("case %s: %w", c.Name, err)
		}
	}
	if c.Workspace.Git == "" && c.Workspace.Files == "" {
		if c.Workspace.Repo != "" {
			return fmt.Errorf("case %s: repository %s has no source on this machine (give one: --source %s=DIR)", c.Name, c.Workspace.Repo, c.Workspace.Repo)
		}
	}
	switch c.Expect {
	case "", "pass", "fail":
	default:
		return fmt.Errorf("case %s: expect %q: want pass or fail", c.Name, c.Expect)
	}
	return nil
}

func loadCaseFile(fsys fs.FS, name string) (*Case, error) {
	c := &Case{}
	if err := decodeTOML(fsys, name, c); err != nil {
		return nil, err
	}
	if c.Name == "" {
		c.Name = strings.TrimSuffix(path.Base(name), ".toml")
		if c.Name == "case" {
			c.Name = path.Base(path.Dir(name))
		}
	}
	c.Root = path.Dir(name)
	c.Source = name
	return c, nil
}

// loadCaseDir returns the case dir is, or nil when it is not one.
func loadCaseDir(fsys fs.FS, dir string) (*Case, error) {
	has := func(n string) bool { _, err := fs.Stat(fsys, path.Join(dir, n)); return err == nil }
	switch {
	case has("case.toml"):
		return loadCaseFile(fsys, path.Join(dir, "case.toml"))
	case has("spec.json"):
		return ImportSWEBench(fsys, dir)
	case has("task.toml"):
		return ImportHarbor(fsys, dir)
	}
	return nil, nil
}

func decodeTOML(fsys fs.FS, name string, v any) error {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	md, err := toml.Decode(string(b), v)
	if err != nil {
		return fmt.Errorf("eval: %s: %w", name, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return fmt.Errorf("eval: %s: unknown key %s", name, und[0])
	}
	return nil
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
