package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
)

func (a *app) mcpCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "mcp", Short: "Keel as an MCP server: hand work to Keel from any MCP client"}
	cmd.AddCommand(a.mcpServeCmd(), a.mcpCallCmd())
	return cmd
}

func (a *app) mcpServeCmd() *cobra.Command {
	var wait time.Duration
	var httpAddr string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve Keel's runs and approvals over MCP on stdin and stdout",
		Long: `Serve speaks the Model Context Protocol on standard input and output, so
that an MCP client (an IDE, a chat app, another agent, the MCP Inspector)
can hand work to Keel and keep it governed. Its tools:

  start_run        start a run (a task in a workspace, or the bundled demo)
  run_status       a run's status, steps, cost, output and pending approvals
  run_timeline     a run's timeline, as keel runs show prints it
  list_approvals   the tool calls waiting for a person
  answer_approval  approve or deny a waiting call; the run continues

Runs execute in this process, on the journal of --db, with the policy and
sandbox of keel run; a run keeps executing while the server runs, and one
interrupted by the server's end continues with keel runs resume (or the
next answer_approval). start_run and answer_approval return when the run
pauses or ends, or after --wait.

With --http ADDR it speaks streamable HTTP at http://ADDR/mcp instead, on
a loopback address only. keel serve offers the same tools at /mcp behind
its API tokens, acting through the API with the caller's token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s := &mcpServe{a: a, wait: wait, runs: map[string]chan struct{}{}}
			if httpAddr != "" {
				return s.serveHTTP(cmd.Context(), httpAddr)
			}
			return s.server().Run(cmd.Context(), &sdk.StdioTransport{})
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 2*time.Minute, "how long start_run and answer_approval wait for the run to pause or end before they answer")
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP at http://ADDR/mcp instead of stdio (a loopback address, e.g. 127.0.0.1:8421; keel serve offers /mcp to a team)")
	return cmd
}

// mcpServe is the state of keel mcp serve: the executions it started.
type mcpServe struct {
	a    *app
	wait time.Duration

	mu   sync.Mutex
	runs map[string]chan struct{} // run id → closed when its execution ends
}

type startRunIn struct {
	Task      string   `json:"task,omitempty" jsonschema:"what the agent should do (not needed with demo)"`
	Demo      bool     `json:"demo,omitempty" jsonschema:"run Keel's bundled demo (a scripted model fixes a failing test; it asks for approval before editing the file)"`
	Workspace string   `json:"workspace,omitempty" jsonschema:"host directory the agent works in (required unless demo)"`
	Model     string   `json:"model,omitempty" jsonschema:"model spec (default from config.toml)"`
	Policy    string   `json:"policy,omitempty" jsonschema:"policy file deciding the run's tool calls (default: Keel's default policy)"`
	MaxSteps  *int     `json:"max_steps,omitempty" jsonschema:"stop after this many model calls (default 500; 0: no limit)"`
	AllowHost []string `json:"allow_host,omitempty" jsonschema:"hosts the sandbox may reach"`
}

type runIn struct {
	RunID string `json:"run_id" jsonschema:"the run's id"`
}

type approvalsIn struct {
	RunID string `json:"run_id,omitempty" jsonschema:"only this run"`
}

type answerIn struct {
	RunID    string `json:"run_id" jsonschema:"the run's id"`
	CallID   string `json:"call_id" jsonschema:"the waiting call's id (from list_approvals)"`
	Decision string `json:"decision" jsonschema:"approve or deny"`
	Reason   string `json:"reason,omitempty" jsonschema:"why (required to deny; shown to the model)"`
}

// runStatus is what run_status, start_run and answer_approval return.
type runStatus struct {
	RunID     string                  `json:"run_id"`
	Status    string                  `json:"status"`
	Steps     int                     `json:"steps"`
	Cost      float64                 `json:"cost_usd"`
	Reason    string                  `json:"reason,omitempty"`
	Message   string                  `json:"message,omitempty"`
	Output    string                  `json:"output,omitempty"`
	Waiting   []approvalInfo          `json:"waiting_for_approval,omitempty"`
	Executing bool                    `json:"executing_here,omitempty"`
	Workspace string                  `json:"workspace,omitempty"`
	Log       string                  `json:"log,omitempty"`
	Pending   []agent.PendingApproval `json:"-"`
}

type approvalInfo struct {
	RunID  string `json:"run_id"`
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
	Since  string `json:"since"`
}

func (s *mcpServe) server() *sdk.Server {
	return newKeelMCPServer[startRunIn](s, mcpTexts{
		instructions: "Keel runs agents in a sandbox under a policy gate. Start a run with start_run, follow it with run_status and run_timeline, and answer the approvals it waits for with list_approvals and answer_approval.",
		startRun:     "Start a Keel run: a task for an agent in a workspace (or the bundled demo). Returns when the run pauses for an approval, ends, or after the server's wait; the run keeps executing meanwhile.",
		wait:         "the server's wait",
	})
}

// keelTools are the handlers of Keel's MCP tools, on a journal in this
// process (keel mcp serve, mcpServe) or through a team server's API
// (keel serve's /mcp, mcpRemote); Start is start_run's input.
type keelTools[Start any] interface {
	startRun(context.Context, *sdk.CallToolRequest, Start) (*sdk.CallToolResult, any, error)
	runStatus(context.Context, *sdk.CallToolRequest, runIn) (*sdk.CallToolResult, any, error)
	runTimeline(context.Context, *sdk.CallToolRequest, runIn) (*sdk.CallToolResult, any, error)
	listApprovals(context.Context, *sdk.CallToolRequest, approvalsIn) (*sdk.CallToolResult, any, error)
	answerApproval(context.Context, *sdk.CallToolRequest, answerIn) (*sdk.CallToolResult, any, error)
}

// mcpTexts are what the two forms of Keel's MCP server say differently:
// the server's instructions, start_run's description and what "a wait"
// is in answer_approval's.
type mcpTexts struct{ instructions, startRun, wait string }

// newKeelMCPServer returns an MCP server offering Keel's tools, handled
// by t.
func newKeelMCPServer[Start any](t keelTools[Start], x mcpTexts) *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "keel", Version: "1"}, &sdk.ServerOptions{Instructions: x.instructions})
	sdk.AddTool(srv, &sdk.Tool{Name: "start_run", Description: x.startRun}, t.startRun)
	sdk.AddTool(srv, &sdk.Tool{Name: "run_status", Description: "A run's status (running, paused, completed, failed, canceled), steps, cost, final output, and the calls it waits for.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.runStatus)
	sdk.AddTool(srv, &sdk.Tool{Name: "run_timeline", Description: "A run's timeline: each step, tool call, gate decision and approval, with tokens, cost and durations.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.runTimeline)
	sdk.AddTool(srv, &sdk.Tool{Name: "list_approvals", Description: "The tool calls waiting for a person's approval, oldest first, with the exact action each would perform.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.listApprovals)
	sdk.AddTool(srv, &sdk.Tool{Name: "answer_approval", Description: "Approve or deny a call a run waits for (decision: approve or deny; a denial needs a reason). The run then continues; returns when it pauses again, ends, or after " + x.wait + "."}, t.answerApproval)
	return srv
}

func textResult(v any) *sdk.CallToolResult {
	b, _ := json.MarshalIndent(v, "", "  ")
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}
}

func errResult(format string, args ...any) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// keel runs a keel command line in this process on the server's journal
// and returns its exit code and output. The command's stdout is w.
func (s *mcpServe) keel(ctx context.Context, w io.Writer, args ...string) (int, string) {
	var errb bytes.Buffer
	argv := append([]string{"--db", s.a.dbPath()}, args...)
	code := Main(ctx, argv, w, &errb)
	return code, errb.String()
}

// demoPolicy is the default policy with one more rule: the demo asks a
// person before it edits a file, so that an MCP client sees an approval.
func demoPolicy() []byte {
	src := string(policy.DefaultSource())
	rule := `
@id("demo-ask-edits")
@ask
@reason("the demo asks a person before it edits a file")
forbid (principal, action == Keel::Action::"edit_file", resource);
`
	i := strings.Index(src, "cedar = '''")
	j := strings.Index(src[i+len("cedar = '''"):], "'''")
	if i < 0 || j < 0 {
		return policy.DefaultSource()
	}
	k := i + len("cedar = '''") + j
	return []byte(src[:k] + rule + src[k:])
}

func (s *mcpServe) startRun(ctx context.Context, _ *sdk.CallToolRequest, in startRunIn) (*sdk.CallToolResult, any, error) {
	args := []string{"run", "--no-wait", "--json"}
	task := in.Task
	ws := in.Workspace
	pol := in.Policy
	if in.Demo {
		if task != "" || ws != "" || in.Model != "" {
			return errResult("demo runs the bundled demo: give no task, workspace or model"), nil, nil
		}
		dir, err := os.MkdirTemp("", "keel-mcp-demo-")
		if err != nil {
			return nil, nil, err
		}
		ws = filepath.Join(dir, "project")
		if err := os.Mkdir(ws, 0o755); err != nil {
			return nil, nil, err
		}
		if err := demo.WriteProject(ws); err != nil {
			return nil, nil, err
		}
		_ = demo.GitInit(ws)
		pol = filepath.Join(dir, "demo-policy.toml")
		if err := os.WriteFile(pol, demoPolicy(), 0o644); err != nil {
			return nil, nil, err
		}
		task = demo.Task
		args = append(args, "--model", "scripted:demo", "--max-steps", "20")
	} else {
		if strings.TrimSpace(task) == "" {
			return errResult("give a task (or demo: true)"), nil, nil
		}
		if ws == "" {
			return errResult("give the workspace: the host directory the agent works in"), nil, nil
		}
		if in.Model != "" {
			args = append(args, "--model", in.Model)
		}
		if in.MaxSteps != nil {
			args = append(args, "--max-steps", fmt.Sprint(*in.MaxSteps))
		}
	}
	args = append(args, "--workspace", ws)
	if pol != "" {
		args = append(args, "--policy", pol)
	}
	for _, h := range in.AllowHost {
		args = append(args, "--allow-host", h)
	}
	args = append(args, "--", task)
	id, log, err := s.execute(args, "")
	if err != nil {
		return errResult("the run did not start: %v\n%s", err, log), nil, nil
	}
	st, err := s.status(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	st.Workspace = ws
	st.Log = tailText(log, 2000)
	return textResult(st), nil, nil
}

// execute starts a keel command that executes a run (run, approve) in
// the background and waits until the run pauses or ends, or s.wait
// passes. It returns the run's id (read from the first journal event of
// --json, or known) and the command's stderr so far when it ended.
func (s *mcpServe) execute(args []string, known string) (string, string, error) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	var (
		code int
		log  string
	)
	// The execution outlives the MCP request that started it.
	go func() {
		code, log = s.keel(context.Background(), pw, args...)
		pw.Close()
		close(done)
	}()
	idc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		sent := false
		for sc.Scan() {
			if sent {
				continue
			}
			var e journal.Event
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.RunID != "" {
				idc <- e.RunID
				sent = true
			}
		}
		io.Copy(io.Discard, pr)
		if !sent {
			close(idc)
		}
	}()
	id := known
	if id == "" {
		select {
		case id = <-idc:
		case <-done:
			id = <-idc
		}
	}
	if id == "" {
		<-done
		return "", log, fmt.Errorf("exit status %d", code)
	}
	s.track(id, done)
	select {
	case <-done:
	case <-time.After(s.wait):
	}
	select {
	case <-done:
		return id, log, nil
	default:
		return id, "", nil
	}
}

func (s *mcpServe) track(id string, done chan struct{}) {
	s.mu.Lock()
	s.runs[id] = done
	s.mu.Unlock()
}

func (s *mcpServe) executing(id string) bool {
	s.mu.Lock()
	done := s.runs[id]
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (s *mcpServe) status(ctx context.Context, id string) (*runStatus, error) {
	store, err := s.a.openStore(ctx)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	rt := agent.NewRuntime(store, nil)
	st, _, err := rt.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &runStatus{RunID: id, Status: string(st.Status), Steps: st.Steps, Cost: st.Cost, Executing: s.executing(id)}
	if st.Ended != nil {
		out.Reason, out.Message, out.Output = st.Ended.Reason, st.Ended.Message, st.Ended.Output
	}
	for _, p := range st.Pending() {
		p.RunID = id
		out.Waiting = append(out.Waiting, approvalOf(p))
	}
	return out, nil
}

func approvalOf(p agent.PendingApproval) approvalInfo {
	return approvalInfo{RunID: p.RunID, CallID: p.CallID, Tool: p.Tool, Action: tailText(p.Action, 4000), Reason: tailText(p.Reason, 4000), Since: p.Time.UTC().Format(time.RFC3339)}
}

func (s *mcpServe) runStatus(ctx context.Context, _ *sdk.CallToolRequest, in runIn) (*sdk.CallToolResult, any, error) {
	st, err := s.status(ctx, in.RunID)
	if err != nil {
		return errResult("%v", err), nil, nil
	}
	return textResult(st), nil, nil
}

func (s *mcpServe) runTimeline(ctx context.Context, _ *sdk.CallToolRequest, in runIn) (*sdk.CallToolResult, any, error) {
	var out bytes.Buffer
	code, log := s.keel(ctx, &out, "runs", "show", in.RunID)
	if code != 0 {
		return errResult("%s", strings.TrimSpace(log)), nil, nil
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: tailText(out.String(), 50000)}}}, nil, nil
}

func (s *mcpServe) listApprovals(ctx context.Context, _ *sdk.CallToolRequest, in approvalsIn) (*sdk.CallToolResult, any, error) {
	store, err := s.a.openStore(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer store.Close()
	pending, err := agent.NewRuntime(store, nil).Approvals(ctx, &agent.ApprovalsParams{RunID: in.RunID})
	if err != nil {
		return errResult("%v", err), nil, nil
	}
	list := []approvalInfo{}
	for _, p := range pending {
		list = append(list, approvalOf(p))
	}
	return textResult(map[string]any{"approvals": list}), nil, nil
}

func (s *mcpServe) answerApproval(ctx context.Context, _ *sdk.CallToolRequest, in answerIn) (*sdk.CallToolResult, any, error) {
	var verb string
	switch in.Decision {
	case "approve", "allow":
		verb = "approve"
	case "deny":
		verb = "deny"
		if strings.TrimSpace(in.Reason) == "" {
			return errResult("a denial needs a reason (the model is shown it)"), nil, nil
		}
	default:
		return errResult("decision %q: want approve or deny", in.Decision), nil, nil
	}
	if in.RunID == "" || in.CallID == "" {
		return errResult("give run_id and call_id (see list_approvals)"), nil, nil
	}
	if s.executing(in.RunID) {
		// This process already executes the run, waiting for the
		// decision: record it only; the execution continues itself.
		var out bytes.Buffer
		args := []string{verb, in.RunID, in.CallID, "--no-resume"}
		if in.Reason != "" {
			args = append(args, "--reason", in.Reason)
		}
		if code, log := s.keel(ctx, &out, args...); code != 0 {
			return errResult("%s", strings.TrimSpace(log)), nil, nil
		}
	} else {
		args := []string{verb, in.RunID, in.CallID, "--no-wait", "--json", "--by", "mcp-client"}
		if in.Reason != "" {
			args = append(args, "--reason", in.Reason)
		}
		_, log, _ := s.execute(args, in.RunID)
		if st, err := s.status(ctx, in.RunID); err == nil && st.Status == string(journal.StatusPaused) && waitsFor(st, in.CallID) {
			// The decision was not recorded.
			return errResult("%s", strings.TrimSpace(log)), nil, nil
		}
	}
	st, err := s.status(ctx, in.RunID)
	if err != nil {
		return nil, nil, err
	}
	return textResult(st), nil, nil
}

func waitsFor(st *runStatus, callID string) bool {
	for _, w := range st.Waiting {
		if w.CallID == callID {
			return true
		}
	}
	return false
}

// tailText cuts s to its last n bytes (on a line boundary when it can),
// saying so.
func tailText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := s[len(s)-n:]
	if i := strings.IndexByte(cut, '\n'); i >= 0 && i < len(cut)-1 {
		cut = cut[i+1:]
	}
	return fmt.Sprintf("[%d bytes left out]\n%s", len(s)-len(cut), cut)
}
