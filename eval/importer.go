package eval

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/keel-run/keel/model/replay"
)

// sweSpec is the part of a SWE-bench-style instance file (spec.json) a
// case needs.
type sweSpec struct {
	InstanceID        string   `json:"instance_id"`
	Repo              string   `json:"repo"`
	BaseCommit        string   `json:"base_commit"`
	ProblemStatement  string   `json:"problem_statement"`
	TestPatch         string   `json:"test_patch"`
	TestFilesResetCmd string   `json:"test_files_reset_cmd"`
	TestCmd           string   `json:"test_cmd"`
	FailToPass        []string `json:"fail_to_pass"`
	PassToPass        []string `json:"pass_to_pass"`
}

// ImportSWEBench reads the SWE-bench-style instance in dir: spec.json (the
// repository and base commit, the hidden test patch, the command that
// resets the test files, the test command, the tests that must pass) and
// the recorded trajectories beside it (*.traj.json), sorted by name. The
// case's task is the instance's problem statement, else the first
// recording's task. Its one check resets the test files, applies the test
// patch and runs the test command; it passes when every test of
// fail_to_pass and pass_to_pass is reported passed. The workspace is the
// repository (Workspace.Repo: its clone comes from the suite's sources)
// at the base commit, mounted at /testbed as the recordings saw it.
func ImportSWEBench(fsys fs.FS, dir string) (*Case, error) {
	b, err := fs.ReadFile(fsys, path.Join(dir, "spec.json"))
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	var sp sweSpec
	if err := json.Unmarshal(b, &sp); err != nil {
		return nil, fmt.Errorf("eval: %s/spec.json: %w", dir, err)
	}
	if sp.Repo == "" || sp.BaseCommit == "" || sp.TestCmd == "" {
		return nil, fmt.Errorf("eval: %s/spec.json: want repo, base_commit and test_cmd", dir)
	}
	c := &Case{
		Name:      sp.InstanceID,
		Task:      sp.ProblemStatement,
		Workspace: Workspace{Repo: sp.Repo, Commit: sp.BaseCommit, MountPath: "/testbed"},
		Source:    path.Join(dir, "spec.json"),
		Root:      dir,
	}
	if c.Name == "" {
		c.Name = path.Base(dir)
	}
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".traj.json") {
			c.Recordings = append(c.Recordings, e.Name())
		}
	}
	slices.Sort(c.Recordings)
	if c.Task == "" && len(c.Recordings) > 0 {
		rb, err := fs.ReadFile(fsys, path.Join(dir, c.Recordings[0]))
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
		tr, err := replay.Parse(rb)
		if err != nil {
			return nil, fmt.Errorf("eval: %s/%s: %w", dir, c.Recordings[0], err)
		}
		c.Task = tr.Task()
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	if sp.TestFilesResetCmd != "" {
		script.WriteString(sp.TestFilesResetCmd + "\n")
	}
	check := Check{Name: "tests", AnyExit: true, Passed: append(slices.Clone(sp.FailToPass), sp.PassToPass...)}
	if sp.TestPatch != "" {
		check.Files = map[string]string{"test.patch": sp.TestPatch}
		script.WriteString("git apply .keel-eval/test.patch\n")
	}
	script.WriteString("set +e\n" + sp.TestCmd + "\n")
	check.Run = script.String()
	if len(check.Passed) == 0 {
		check.AnyExit = false // no list: the test command's status decides
	}
	c.Checks = []Check{check}
	return c, nil
}

// harborTask is the part of a Harbor task.toml a case needs.
type harborTask struct {
	Verifier struct {
		TimeoutSec float64 `toml:"timeout_sec"`
	} `toml:"verifier"`
	Agent struct {
		TimeoutSec float64 `toml:"timeout_sec"`
	} `toml:"agent"`
}

// ImportHarbor reads the Harbor task directory dir: task.toml (the agent's
// and the verifier's time limits), instruction.md (the task), tests/ (the
// verifier: test.sh and its files) and environment/ (the files of the
// task's image, without its Dockerfile, become the workspace, mounted at
// /app). The check runs tests/test.sh from the workspace's .keel-eval/
// directory after the run, with Harbor's absolute paths (/tests/,
// /logs/verifier/) rewritten under it; it passes when the script writes a
// reward of 1 to reward.txt, or, when it writes none, exits 0. Keel does
// not build the task's Docker image: what the image installs must be on
// the host (the sandbox sees the host's system read-only) or done by a
// setup script.
func ImportHarbor(fsys fs.FS, dir string) (*Case, error) {
	var t harborTask
	b, err := fs.ReadFile(fsys, path.Join(dir, "task.toml"))
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	if _, err := toml.Decode(string(b), &t); err != nil {
		return nil, fmt.Errorf("eval: %s/task.toml: %w", dir, err)
	}
	instr, err := fs.ReadFile(fsys, path.Join(dir, "instruction.md"))
	if err != nil {
		return nil, fmt.Errorf("eval: harbor task %s: %w", dir, err)
	}
	c := &Case{Name: path.Base(dir), Task: string(instr), Source: path.Join(dir, "task.toml"), Root: dir,
		Workspace: Workspace{MountPath: "/app"}, Timeout: Duration(time.Duration(t.Agent.TimeoutSec * float64(time.Second)))}
	if st, err := fs.Stat(fsys, path.Join(dir, "environment")); err == nil && st.IsDir() {
		c.Workspace.Files = "environment"
	}
	files := map[string]string{}
	entries, err := fs.ReadDir(fsys, path.Join(dir, "tests"))
	if err != nil {
		return nil, fmt.Errorf("eval: harbor task %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		fb, err := fs.ReadFile(fsys, path.Join(dir, "tests", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
		files[e.Name()] = harborPaths(string(fb))
	}
	if _, ok := files["test.sh"]; !ok {
		return nil, fmt.Errorf("eval: harbor task %s: no tests/test.sh", dir)
	}
	c.Checks = []Check{{
		Name:    "tests/test.sh",
		Files:   files,
		Timeout: Duration(time.Duration(t.Verifier.TimeoutSec * float64(time.Second))),
		Run: `mkdir -p .keel-eval/logs/verifier
bash .keel-eval/test.sh; s=$?
if [ -f .keel-eval/logs/verifier/reward.txt ]; then
  r=$(tr -d ' \n' < .keel-eval/logs/verifier/reward.txt)
  echo "reward: $r"
  case "$r" in 1|1.0|1.00) exit 0;; *) exit 1;; esac
fi
exit $s
`,
	}}
	return c, nil
}

// harborPaths rewrites a Harbor verifier's absolute paths to the
// workspace's .keel-eval/ directory.
func harborPaths(s string) string {
	s = strings.ReplaceAll(s, "/logs/verifier", ".keel-eval/logs/verifier")
	s = strings.ReplaceAll(s, "/tests/", ".keel-eval/")
	return s
}
