package cli_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"

	"github.com/keel-run/keel/journal"
)

// readmeBlock returns the first ```sh block of README.md after the line
// containing after, parsed as a shell program.
func readmeBlock(t *testing.T, after string) *syntax.File {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, after)
	if i < 0 {
		t.Fatalf("README.md no longer has %q", after)
	}
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(s[i:])
	if m == nil {
		t.Fatalf("README.md has no ```sh block after %q", after)
	}
	f, err := syntax.NewParser().Parse(strings.NewReader(m[1]), "README.md")
	if err != nil {
		t.Fatalf("README.md's block after %q is not shell: %v", after, err)
	}
	return f
}

// argv returns the words of a simple command as written (the README's
// recipes use no expansions).
func argv(t *testing.T, cmd syntax.Command) []string {
	t.Helper()
	call, ok := cmd.(*syntax.CallExpr)
	if !ok {
		t.Fatalf("README command %T is not a simple command", cmd)
	}
	var args []string
	for _, w := range call.Args {
		lit := w.Lit()
		if lit == "" {
			t.Fatalf("README word %v is not a literal", w)
		}
		args = append(args, lit)
	}
	if len(args) == 0 || args[0] != "keel" {
		t.Fatalf("README command %q is not a keel command", args)
	}
	return args[1:]
}

// The README's "real OpenAI client path offline" recipe, as written:
// `keel model serve-replay … &`, then `keel model replay-task … | keel run
// --model openai-compatible:…@http://…/v1 --task-file - …`. `keel run`
// streams its requests, so the replay server must answer a streamed
// request, and the run must follow the recording to its marker. Only the
// paths (the trajectory's, the workspace's) and the port are this
// test's own (and the journal: --db).
func TestReadmeServeReplayRecipe(t *testing.T) {
	setup(t)
	f := readmeBlock(t, "To drive the real OpenAI client path offline")
	if len(f.Stmts) != 2 || !f.Stmts[0].Background {
		t.Fatalf("the recipe is no longer `serve-replay &` then a pipe: %d statements", len(f.Stmts))
	}
	serveArgs := argv(t, f.Stmts[0].Cmd)
	pipe, ok := f.Stmts[1].Cmd.(*syntax.BinaryCmd)
	if !ok || pipe.Op != syntax.Pipe {
		t.Fatal("the recipe's second command is no longer a pipe")
	}
	taskArgs, runArgs := argv(t, pipe.X.Cmd), argv(t, pipe.Y.Cmd)

	ws := t.TempDir()
	db := filepath.Join(t.TempDir(), "keel.db")
	adapt := func(args []string, url string) []string {
		var out []string
		for _, a := range args {
			switch {
			case strings.HasPrefix(a, "testdata/"):
				a = filepath.Join("..", "..", a)
			case a == "/tmp/marshmallow":
				a = ws
			case a == "127.0.0.1:8421":
				a = "127.0.0.1:0"
			case url != "" && strings.Contains(a, "@http://127.0.0.1:8421/v1"):
				a = strings.Replace(a, "http://127.0.0.1:8421/v1", url, 1)
			}
			out = append(out, a)
		}
		return out
	}
	sub := func(args []string) *exec.Cmd {
		b, _ := json.Marshal(args)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(b))
		return cmd
	}

	server := sub(adapt(serveArgs, ""))
	out, err := server.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Process.Kill(); server.Wait() })
	url, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("serve-replay printed no address: %v", err)
	}
	url = strings.TrimSpace(url)

	task := sub(adapt(taskArgs, ""))
	run := sub(append(adapt(runArgs, url), "--db", db))
	if run.Stdin, err = task.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	var runErr strings.Builder
	run.Stderr = &runErr
	if err := task.Start(); err != nil {
		t.Fatal(err)
	}
	if err := run.Run(); err != nil {
		t.Fatalf("keel run %q: %v\n%s", runArgs, err, runErr.String())
	}
	if err := task.Wait(); err != nil {
		t.Fatalf("keel model replay-task: %v", err)
	}
	_, st := lastRun(t, db)
	if st.Status != journal.StatusCompleted || st.Ended.Reason != "marker" || st.Steps != 74 {
		t.Errorf("the recipe's run: %s (%+v) after %d steps, want completed at the marker after 74\n%s", st.Status, st.Ended, st.Steps, runErr.String())
	}
}
