// Command sidebyside runs one recorded trajectory three ways on fresh
// clones of its task's repository: the recorded commands through bare
// `bash -c`, through charmbracelet/crush, and through `keel run`, and prints
// what each adds to the bare commands: the wall of the run, the overhead per
// step (median and p90), the first and last request's size and the peak
// memory of the agent's process.
//
// The model of crush and Keel is the same zero-latency recording served over
// HTTP (the handler of `keel model serve-replay`), so both run their real
// OpenAI-compatible client path, and every step is timed the same way: from
// the arrival of one model request to the arrival of the next. A step's
// overhead is that interval minus the bare wall of the step's command.
//
//	go run ./internal/sidebyside -repo MIRROR -keel ./keel -crush ./crush -rounds 3
//
// It needs root (it runs everything in a network namespace of its own, with
// only a loopback, as Keel's sandbox runs commands; and crush and bare run
// the commands where the recording did, in /testbed, which it points at
// each clone in turn) and leaves nothing behind.
// Measure on a quiet machine and say its load: the numbers are only as
// quiet as the machine.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/keel-run/keel/model/replay"
)

const marker = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

func main() {
	if os.Getenv("SIDEBYSIDE_NETNS") == "" {
		// Every contender runs without a network, as Keel's sandbox
		// does by default: a recorded `pip install` then fails at once
		// everywhere instead of waiting for a host it cannot reach.
		// The model is served on the namespace's own loopback.
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, "sidebyside:", err)
			os.Exit(1)
		}
		cmd := exec.Command("unshare", append([]string{"--net", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`, self}, os.Args[1:]...)...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), "SIDEBYSIDE_NETNS=1")
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "sidebyside:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sidebyside:", err)
		os.Exit(1)
	}
}

type options struct {
	traj, spec, repo string
	keel, crush      string
	rounds           int
	keep             bool
	only             string
}

func run() error {
	var o options
	flag.StringVar(&o.traj, "traj", "testdata/trajectories/deepseek_chat_dev.traj.json", "recorded trajectory (mini-swe-agent format, one bash tool)")
	flag.StringVar(&o.spec, "spec", "testdata/trajectories/spec.json", "task spec with base_commit")
	flag.StringVar(&o.repo, "repo", "", "git repository (a mirror) of the task, cloned fresh for every contender")
	flag.StringVar(&o.keel, "keel", "", "keel binary")
	flag.StringVar(&o.crush, "crush", "", "crush binary (optional)")
	flag.IntVar(&o.rounds, "rounds", 1, "rounds; every round runs every contender once, in turn")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch directory")
	flag.StringVar(&o.only, "only", "", "run only the contenders whose name starts with this (bare always runs)")
	flag.Parse()
	if o.repo == "" || o.keel == "" {
		return errors.New("-repo and -keel are required")
	}
	tr, err := replay.Load(o.traj)
	if err != nil {
		return err
	}
	base, err := baseCommit(o.spec)
	if err != nil {
		return err
	}
	cmds, err := commands(tr)
	if err != nil {
		return err
	}
	scratch, err := os.MkdirTemp("", "sidebyside-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(scratch)
	}
	defer os.Remove("/testbed")

	rec, url, stop, err := serve(tr)
	if err != nil {
		return err
	}
	defer stop()
	// crush's bash tool requires a description beside the command: it
	// gets the same recording with one added to every call.
	crushRec, crushURL := rec, url
	if o.crush != "" {
		ctr, err := withDescriptions(o.traj, scratch)
		if err != nil {
			return err
		}
		var stop func()
		if crushRec, crushURL, stop, err = serve(ctr); err != nil {
			return err
		}
		defer stop()
	}

	contenders := []contender{{name: "bare"}}
	if o.crush != "" {
		contenders = append(contenders, contender{name: "crush"})
	}
	contenders = append(contenders, contender{name: "keel"}, contender{name: "keel --no-checkpoints", args: []string{"--no-checkpoints"}})
	contenders = slices.DeleteFunc(contenders, func(c contender) bool { return c.name != "bare" && !strings.HasPrefix(c.name, o.only) })

	results := map[string][]*result{}
	var bare []*result
	for r := 0; r < o.rounds; r++ {
		for _, c := range contenders {
			ws := filepath.Join(scratch, fmt.Sprintf("r%d-%s", r, strings.Fields(c.name)[0]+strconv.Itoa(len(c.args))))
			if err := clone(o.repo, base, ws); err != nil {
				return err
			}
			var res *result
			switch c.name {
			case "bare":
				res, err = runBare(ws, cmds)
			case "crush":
				res, err = runCrush(o.crush, ws, scratch, crushURL, tr, crushRec)
			default:
				res, err = runKeel(o.keel, c.args, ws, scratch, url, tr, rec)
			}
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", c.name, r+1, err)
			}
			res.patchOK = samePatch(ws, tr.Submission())
			fmt.Fprintf(os.Stderr, "round %d %-22s wall %6.2fs steps %d patch-as-recorded %v\n", r+1, c.name, res.wall.Seconds(), len(res.steps), res.patchOK)
			results[c.name] = append(results[c.name], res)
			if c.name == "bare" {
				bare = append(bare, res)
			}
			if !o.keep {
				os.RemoveAll(ws)
			}
		}
	}
	report(os.Stdout, contenders, results, bare)
	return nil
}

// serve serves tr's recorded responses on the loopback, timing requests.
func serve(tr *replay.Trajectory) (*recorder, string, func(), error) {
	rec := &recorder{h: replay.NewHandler(tr)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	srv := &http.Server{Handler: rec}
	go srv.Serve(ln)
	return rec, "http://" + ln.Addr().String() + "/v1", func() { srv.Close() }, nil
}

// withDescriptions writes a copy of the trajectory at path whose bash
// calls (in the messages and in the recorded raw responses) carry a
// description beside their command, and loads it.
func withDescriptions(path, dir string) (*replay.Trajectory, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if fn, ok := v["function"].(map[string]any); ok && fn["name"] == "bash" {
				if args, ok := fn["arguments"].(string); ok {
					var in map[string]any
					if json.Unmarshal([]byte(args), &in) == nil && in["description"] == nil {
						in["description"] = "recorded command"
						if nb, err := json.Marshal(in); err == nil {
							fn["arguments"] = string(nb)
						}
					}
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "crush.traj.json")
	if err := os.WriteFile(p, out, 0o600); err != nil {
		return nil, err
	}
	return replay.Load(p)
}

type contender struct {
	name string
	args []string
}

type result struct {
	wall        time.Duration
	steps       []time.Duration // per step: bare = the command; agents = request to request
	first, last int             // request bytes
	peakKB      int64           // the agent process's own peak RSS (VmHWM)
	treeKB      int64           // peak RSS of the process and its waited children (rusage)
	patchOK     bool
}

// commands returns the command of every recorded tool call, in order.
func commands(tr *replay.Trajectory) ([]string, error) {
	var out []string
	for _, t := range tr.Turns() {
		for _, c := range t.Message.ToolCalls {
			var in struct{ Command string }
			if err := json.Unmarshal([]byte(c.Arguments), &in); err != nil {
				return nil, fmt.Errorf("turn %d: %w", t.Index+1, err)
			}
			out = append(out, in.Command)
		}
	}
	return out, nil
}

func baseCommit(spec string) (string, error) {
	b, err := os.ReadFile(spec)
	if err != nil {
		return "", err
	}
	var s struct {
		BaseCommit string `json:"base_commit"`
	}
	if err := json.Unmarshal(b, &s); err != nil || s.BaseCommit == "" {
		return "", fmt.Errorf("%s: no base_commit (%v)", spec, err)
	}
	return s.BaseCommit, nil
}

func clone(repo, commit, dir string) error {
	for _, args := range [][]string{{"clone", "-q", "--no-checkout", repo, dir}, {"-C", dir, "checkout", "-q", commit}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// testbed points /testbed at ws, where the recorded commands expect the
// repository.
func testbed(ws string) error {
	os.Remove("/testbed")
	return os.Symlink(ws, "/testbed")
}

var recordedEnv = []string{"PAGER=cat", "MANPAGER=cat", "LESS=-R", "PIP_PROGRESS_BAR=off", "TQDM_DISABLE=1", "PYTHONPATH=/testbed/src"}

func runBare(ws string, cmds []string) (*result, error) {
	if err := testbed(ws); err != nil {
		return nil, err
	}
	defer os.Remove("/testbed")
	res := &result{}
	start := time.Now()
	for _, c := range cmds {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "-c", c)
		cmd.Dir = "/testbed"
		cmd.Env = append(os.Environ(), recordedEnv...)
		t := time.Now()
		out, _ := cmd.CombinedOutput()
		res.steps = append(res.steps, time.Since(t))
		if d := time.Since(t); d > 5*time.Second {
			fmt.Fprintf(os.Stderr, "bare: %.1fs: %.200s\n", d.Seconds(), c)
		}
		cancel()
		if bytes.HasPrefix(bytes.TrimLeft(out, " \n"), []byte(marker)) {
			break
		}
	}
	res.wall = time.Since(start)
	return res, nil
}

func runKeel(bin string, args []string, ws, scratch, url string, tr *replay.Trajectory, rec *recorder) (*result, error) {
	home := filepath.Join(scratch, "keel-home")
	os.RemoveAll(home)
	argv := append([]string{"run", "--db", filepath.Join(home, "keel.db"), "--create-db",
		"--model", "openai-compatible:deepseek-chat@" + url, "--task-file", "-",
		"--completion-marker", marker, "--workspace", ws, "--mount-path", "/testbed", "--env", "PYTHONPATH=/testbed/src"}, args...)
	cmd := exec.Command(bin, argv...)
	cmd.Env = append(os.Environ(), "KEEL_HOME="+home, "OPENAI_API_KEY=replay")
	cmd.Stdin = strings.NewReader(tr.Task())
	defer os.RemoveAll(home)
	return measure(cmd, rec)
}

func runCrush(bin, ws, scratch, url string, tr *replay.Trajectory, rec *recorder) (*result, error) {
	if err := testbed(ws); err != nil {
		return nil, err
	}
	defer os.Remove("/testbed")
	home := filepath.Join(scratch, "crush-home")
	os.RemoveAll(home)
	conf := filepath.Join(home, "config", "crush")
	if err := os.MkdirAll(conf, 0o700); err != nil {
		return nil, err
	}
	rc := fmt.Sprintf("provider add replay --type openai-compat --base-url %q --api-key replay\n"+
		"model add replay/deepseek-chat --name replay --context-window 64000 --default-max-tokens 4096\n"+
		"option provider-auto-update false\n", url)
	if err := os.WriteFile(filepath.Join(conf, "crushrc"), []byte(rc), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "--quiet", "--model", "replay/deepseek-chat", "--small-model", "replay/deepseek-chat", tr.Task())
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, "config"), "XDG_DATA_HOME="+filepath.Join(home, "data"),
		"XDG_STATE_HOME="+filepath.Join(home, "state"), "XDG_CACHE_HOME="+filepath.Join(home, "cache"),
		"CRUSH_DISABLE_METRICS=1", "CRUSH_DISABLE_PROVIDER_AUTO_UPDATE=1", "DO_NOT_TRACK=1")
	defer os.RemoveAll(home)
	return measure(cmd, rec)
}

// measure runs an agent, sampling its own peak RSS, and reads its steps
// from the requests the recorder saw.
func measure(cmd *exec.Cmd, rec *recorder) (*result, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	rec.reset()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	var hwm int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if kb := vmHWM(cmd.Process.Pid); kb > hwm {
				hwm = kb
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	wg.Wait()
	res := &result{wall: time.Since(start), peakKB: hwm}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.treeKB = ru.Maxrss
	}
	reqs := rec.requests()
	if len(reqs) == 0 {
		return nil, fmt.Errorf("no model request (exit %v): %s", err, tail(out.String()))
	}
	res.first, res.last = reqs[0].size, reqs[len(reqs)-1].size
	for i := 1; i < len(reqs); i++ {
		res.steps = append(res.steps, reqs[i].at.Sub(reqs[i-1].at))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s exited %v: %s\n", cmd.Path, err, tail(out.String()))
	}
	return res, nil
}

func vmHWM(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

// samePatch reports whether the workspace's diff is the recorded submission
// (index lines aside).
func samePatch(ws, want string) bool {
	got, err := exec.Command("git", "-C", ws, "diff").Output()
	if err != nil {
		return false
	}
	norm := func(s string) string {
		var b strings.Builder
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			if !strings.HasPrefix(l, "index ") {
				b.WriteString(l + "\n")
			}
		}
		return b.String()
	}
	return norm(string(got)) == norm(want)
}

// recorder times the model requests that offer tools (a title or summary
// request offers none and is not a step).
type recorder struct {
	h    http.Handler
	mu   sync.Mutex
	reqs []request
}

type request struct {
	at   time.Time
	size int
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	at := time.Now()
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var probe struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(body, &probe) == nil && len(probe.Tools) > 0 {
		r.mu.Lock()
		r.reqs = append(r.reqs, request{at: at, size: len(body)})
		r.mu.Unlock()
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	r.h.ServeHTTP(w, req)
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.reqs = nil
	r.mu.Unlock()
}

func (r *recorder) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

func report(w io.Writer, contenders []contender, results map[string][]*result, bare []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\twall (median of rounds)\tvs bare\toverhead/step median\tp90\tfirst request\tlast request\tpeak RSS (own / with children)\tpatch as recorded")
	bareWall := median(walls(bare))
	for _, c := range contenders {
		rs := results[c.name]
		wall := median(walls(rs))
		row := fmt.Sprintf("%s\t%.2f s\t%.2f×", c.name, wall.Seconds(), wall.Seconds()/bareWall.Seconds())
		ok := 0
		for _, r := range rs {
			if r.patchOK {
				ok++
			}
		}
		if c.name == "bare" {
			fmt.Fprintf(tw, "%s\t0\t0\t\t\t\t%d/%d\n", row, ok, len(rs))
			continue
		}
		var over []time.Duration
		for i, r := range rs {
			// interval k covers the command of turn k (the k-th bare step)
			for k, d := range r.steps {
				if k < len(bare[i].steps) {
					over = append(over, d-bare[i].steps[k])
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%.1f ms\t%.1f ms\t%.1f KB\t%.1f KB\t%d / %d MB\t%d/%d\n", row,
			ms(percentile(over, 50)), ms(percentile(over, 90)), float64(rs[0].first)/1000, float64(rs[0].last)/1000,
			maxKB(rs, func(r *result) int64 { return r.peakKB })/1024, maxKB(rs, func(r *result) int64 { return r.treeKB })/1024, ok, len(rs))
	}
	tw.Flush()
}

func walls(rs []*result) []time.Duration {
	var d []time.Duration
	for _, r := range rs {
		d = append(d, r.wall)
	}
	return d
}

func median(d []time.Duration) time.Duration { return percentile(d, 50) }

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func maxKB(rs []*result, f func(*result) int64) int64 {
	var m int64
	for _, r := range rs {
		m = max(m, f(r))
	}
	return m
}
