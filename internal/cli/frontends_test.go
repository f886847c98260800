package cli_test

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// limitsCase is one row of the front ends' table: the limits asked for,
// in each front end's form ("" or nil: left out).
type limitsCase struct {
	name  string
	steps string // max_steps; "" leaves it out
	// all sets the four limits to steps (not in the web form, which
	// takes only max_steps).
	all bool
	// refused is the error every front end gives; "" when the run is
	// created.
	refused string
}

// frontEnd creates a run of task in ws with c's limits and returns its
// id, or the text of its refusal.
type frontEnd struct {
	name   string
	noAll  bool // takes only max_steps
	create func(t *testing.T, c limitsCase) (id, refusal string)
}

// Every front end that creates runs creates the same run: keel run's
// flags, keel run --server, the API, the web UI's New-run form, Keel's
// MCP tool on the local journal and on a team server, each with limits
// left out, zero, set and negative. The run.created each journals is the
// same but for who asked (ids, times, the caller's person and token);
// a negative limit is refused with the same message by each.
func TestFrontEndsCreateTheSameRun(t *testing.T) {
	db := setup(t)
	serve := startServe(t)
	tok := serve.savedToken(t)
	cl := serve.apiClient(t)
	ws := t.TempDir()
	os.WriteFile(ws+"/README", []byte("a workspace\n"), 0o644)
	const task = "say hello"
	const model = "scripted:demo"

	flags := func(c limitsCase) []string {
		if c.steps == "" {
			return nil
		}
		if c.all {
			d := c.steps + "s"
			return []string{"--max-steps", c.steps, "--max-tokens", c.steps, "--max-cost", c.steps, "--timeout", d}
		}
		return []string{"--max-steps", c.steps}
	}
	mcpArgs := func(c limitsCase) map[string]any {
		args := map[string]any{"task": task, "workspace": ws, "model": model}
		if c.steps != "" {
			var n int
			fmt.Sscan(c.steps, &n)
			args["max_steps"] = n
			if c.all {
				args["max_tokens"], args["max_cost"], args["timeout"] = n, n, c.steps+"s"
			}
		}
		return args
	}
	cliRun := func(server bool) func(t *testing.T, c limitsCase) (string, string) {
		return func(t *testing.T, c limitsCase) (string, string) {
			args := []string{"run", "--no-wait", "--json", "--model", model, "--workspace", ws}
			if server {
				args = append([]string{"--server", serve.url, "--token", tok}, args...)
			}
			args = append(append(args, flags(c)...), "--", task)
			code, out, errOut := keel(t, args...)
			if code == 2 {
				return "", errOut
			}
			for line := range strings.Lines(out) {
				var e journal.Event
				if json.Unmarshal([]byte(line), &e) == nil && e.RunID != "" {
					return e.RunID, ""
				}
			}
			t.Fatalf("keel %v = %d: no run\n%s\n%s", args, code, out, errOut)
			return "", ""
		}
	}
	mcpCall := func(t *testing.T, s *sdk.ClientSession, c limitsCase) (string, string) {
		text, isErr := callText(t, s, "start_run", mcpArgs(c))
		if isErr {
			return "", text
		}
		var st mcpStatus
		if err := json.Unmarshal([]byte(text), &st); err != nil || st.RunID == "" {
			t.Fatalf("start_run: %v %s", err, text)
		}
		return st.RunID, ""
	}
	// Keel's MCP server on the local journal, as an MCP client starts it.
	argv, _ := json.Marshal([]string{"--db", db, "mcp", "serve", "--wait", "1s"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(argv))
	localMCP, err := sdk.NewClient(&sdk.Implementation{Name: "keel-test", Version: "1"}, nil).Connect(t.Context(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer localMCP.Close()
	remoteMCP, err := sdk.NewClient(&sdk.Implementation{Name: "keel-test", Version: "1"}, nil).Connect(t.Context(),
		&sdk.StreamableClientTransport{Endpoint: serve.url + "/mcp", HTTPClient: &http.Client{Transport: bearer(tok)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer remoteMCP.Close()
	web := webSession(t, serve.url, tok)

	fronts := []frontEnd{
		{name: "keel run", create: cliRun(false)},
		{name: "keel run --server", create: cliRun(true)},
		{name: "API", create: func(t *testing.T, c limitsCase) (string, string) {
			req := &api.CreateRun{Task: task, Workspace: ws, Model: model}
			if c.steps != "" {
				var n int
				fmt.Sscan(c.steps, &n)
				req.Limits.MaxSteps = &n
				if c.all {
					n64, f := int64(n), float64(n)
					req.Limits.MaxTokens, req.Limits.MaxCost, req.Limits.Timeout = &n64, &f, c.steps+"s"
				}
			}
			run, err := cl.CreateRun(t.Context(), req)
			if err != nil {
				return "", err.Error()
			}
			return run.ID, ""
		}},
		{name: "web UI form", noAll: true, create: func(t *testing.T, c limitsCase) (string, string) {
			form := url.Values{"task": {task}, "workspace": {ws}, "model": {model}}
			if c.steps != "" {
				form.Set("max_steps", c.steps)
			}
			return web.post(t, "/ui/runs/new", form)
		}},
		{name: "MCP local", create: func(t *testing.T, c limitsCase) (string, string) { return mcpCall(t, localMCP, c) }},
		{name: "MCP on the server", create: func(t *testing.T, c limitsCase) (string, string) { return mcpCall(t, remoteMCP, c) }},
	}
	cases := []limitsCase{
		{name: "absent"},
		{name: "zero", steps: "0"},
		{name: "seven", steps: "7"},
		{name: "all zero", steps: "0", all: true},
		{name: "negative", steps: "-1", refused: "limits.max_steps -1: want 0 (no limit) or more"},
	}
	// What differs by who asks, not by what they asked: ids and times,
	// the person and token named in the labels.
	ignore := cmp.Options{
		cmpopts.IgnoreMapEntries(func(k, _ string) bool { return strings.HasPrefix(k, "keel.") }),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var first *agent.RunCreated
			var firstName string
			for _, f := range fronts {
				if c.all && f.noAll {
					continue
				}
				id, refusal := f.create(t, c)
				if c.refused != "" {
					if !strings.Contains(refusal, c.refused) {
						t.Errorf("%s: refusal %q, want %q", f.name, refusal, c.refused)
					}
					continue
				}
				if refusal != "" {
					t.Errorf("%s: refused: %s", f.name, refusal)
					continue
				}
				created := runCreated(t, cl, id)
				if first == nil {
					first, firstName = created, f.name
					t.Logf("%s: limits %+v", f.name, created.Limits)
					continue
				}
				if d := cmp.Diff(first, created, ignore); d != "" {
					t.Errorf("run.created of %s differs from %s's (-%s +%s):\n%s", f.name, firstName, firstName, f.name, d)
				}
			}
			if first != nil {
				want := map[string]agent.Limits{
					"absent":   {MaxSteps: 500, MaxTokens: 100_000_000, MaxCost: 50, Timeout: agent.Duration(12 * 3600e9)},
					"zero":     {MaxSteps: 0, MaxTokens: 100_000_000, MaxCost: 50, Timeout: agent.Duration(12 * 3600e9)},
					"seven":    {MaxSteps: 7, MaxTokens: 100_000_000, MaxCost: 50, Timeout: agent.Duration(12 * 3600e9)},
					"all zero": {},
				}[c.name]
				if first.Limits != want {
					t.Errorf("limits %+v, want %+v", first.Limits, want)
				}
			}
		})
	}
}

// runCreated returns run id's run.created.
func runCreated(t *testing.T, cl *client.Client, id string) *agent.RunCreated {
	t.Helper()
	for e, err := range cl.Events(t.Context(), id, &client.EventsParams{NoFollow: true}) {
		if err != nil {
			t.Fatalf("events of %s: %v", id, err)
		}
		if e.Type != journal.RunCreated {
			t.Fatalf("run %s starts with %s", id, e.Type)
		}
		var c agent.RunCreated
		if err := json.Unmarshal(e.Payload, &c); err != nil {
			t.Fatal(err)
		}
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		return &c
	}
	t.Fatalf("run %s has no events", id)
	return nil
}

// webUI is a signed-in browser session of the web UI.
type webUI struct {
	base string
	hc   *http.Client
}

func webSession(t *testing.T, base, tok string) *webUI {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	w := &webUI{base: base, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	if _, refusal := w.post(t, "/ui/login", url.Values{"token": {tok}}); refusal != "" {
		t.Fatalf("sign in: %s", refusal)
	}
	return w
}

// post submits a form from the UI's own pages and returns the run id a
// redirect to a run's page names, or the page's text when it answers
// with an error.
func (w *webUI) post(t *testing.T, path string, form url.Values) (string, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, w.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", w.base)
	resp, err := w.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusSeeOther {
		loc := resp.Header.Get("Location")
		if id, ok := strings.CutPrefix(loc, "/ui/runs/"); ok && !slices.Contains([]string{"", "new"}, id) {
			return id, ""
		}
		return "", ""
	}
	return "", fmt.Sprintf("%d %s", resp.StatusCode, html.UnescapeString(string(body)))
}

// Every front end that decides approvals decides the same way: a demo
// run waiting for its edit is approved, or denied with a reason, through
// keel approve|deny (locally and with --server), the API, the web UI's
// approval card, and the MCP tool (locally and on the server), each
// naming the run and the call by a prefix; the approval.resolved each
// journals is the same but for who decided. Each refuses a denial
// without a reason.
func TestFrontEndsDecideTheSameApproval(t *testing.T) {
	db := setup(t)
	serve := startServe(t)
	tok := serve.savedToken(t)
	cl := serve.apiClient(t)
	argv, _ := json.Marshal([]string{"--db", db, "mcp", "serve", "--wait", "1s"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(argv))
	localMCP, err := sdk.NewClient(&sdk.Implementation{Name: "keel-test", Version: "1"}, nil).Connect(t.Context(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer localMCP.Close()
	remoteMCP, err := sdk.NewClient(&sdk.Implementation{Name: "keel-test", Version: "1"}, nil).Connect(t.Context(),
		&sdk.StreamableClientTransport{Endpoint: serve.url + "/mcp", HTTPClient: &http.Client{Transport: bearer(tok)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer remoteMCP.Close()
	web := webSession(t, serve.url, tok)

	type decider struct {
		name   string
		decide func(t *testing.T, id, call, decision, reason string) string // "" or the refusal
	}
	cliDecide := func(server bool) func(t *testing.T, id, call, decision, reason string) string {
		return func(t *testing.T, id, call, decision, reason string) string {
			verb := map[string]string{"approve": "approve", "deny": "deny"}[decision]
			args := []string{verb, id, call, "--reason", reason}
			if server {
				args = append([]string{"--server", serve.url, "--token", tok}, append(args, "--no-wait")...)
			} else {
				args = append(args, "--no-resume")
			}
			// With --server the command follows the run after the
			// decision: a denied demo then fails (exit 1), as it should;
			// the journal says what was decided.
			if code, out, errOut := keel(t, args...); code == 2 || code != 0 && !strings.Contains(errOut, "call demo_") {
				return fmt.Sprintf("exit %d: %s%s", code, out, errOut)
			}
			return ""
		}
	}
	mcpDecide := func(s *sdk.ClientSession) func(t *testing.T, id, call, decision, reason string) string {
		return func(t *testing.T, id, call, decision, reason string) string {
			if text, isErr := callText(t, s, "answer_approval", map[string]any{"run_id": id, "call_id": call, "decision": decision, "reason": reason}); isErr {
				return text
			}
			return ""
		}
	}
	deciders := []decider{
		{"keel approve|deny", cliDecide(false)},
		{"keel --server approve|deny", cliDecide(true)},
		{"API", func(t *testing.T, id, call, decision, reason string) string {
			var err error
			if decision == "deny" {
				_, err = cl.Deny(t.Context(), id, call, &api.Decide{Reason: reason})
			} else {
				_, err = cl.Approve(t.Context(), id, call, &api.Decide{Reason: reason})
			}
			if err != nil {
				return err.Error()
			}
			return ""
		}},
		{"web UI card", func(t *testing.T, id, call, decision, reason string) string {
			d := map[string]string{"approve": "allow", "deny": "deny"}[decision]
			_, refusal := web.post(t, "/ui/approvals/"+url.PathEscape(id)+"/"+url.PathEscape(call), url.Values{"decision": {d}, "call": {call}, "reason": {reason}})
			return refusal
		}},
		{"MCP local", mcpDecide(localMCP)},
		{"MCP on the server", mcpDecide(remoteMCP)},
	}
	// The approval and the denial have runs of their own: they go on at
	// once.
	decisions := []string{"approve", "deny"}
	runEach(t, len(decisions), func(i int) string { return decisions[i] }, func(t *testing.T, i int) {
		decision := decisions[i]
		var first *agent.ApprovalResolved
		var firstName string
		for _, d := range deciders {
			run, err := cl.CreateRun(t.Context(), &api.CreateRun{Demo: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, err := range cl.Events(t.Context(), run.ID, &client.EventsParams{UntilStopped: true}) {
				if err != nil {
					t.Fatal(err)
				}
			}
			r, err := cl.Run(t.Context(), run.ID)
			if err != nil || r.Status != "paused" || len(r.Pending) != 1 {
				t.Fatalf("demo run %+v %v", r, err)
			}
			// A denial without a reason is refused by each, and
			// journals nothing (report 13, P5: the API recorded it).
			if refusal := d.decide(t, run.ID, r.Pending[0].CallID, "deny", ""); refusal == "" {
				t.Errorf("%s: a denial without a reason was not refused", d.name)
			} else if r2, err := cl.Run(t.Context(), run.ID); err != nil || r2.Events != r.Events {
				t.Errorf("%s: the refused denial journaled: %d events, then %d", d.name, r.Events, r2.Events)
			}
			// A request wrong in two ways is refused for the first
			// in the service's order by each (report 15, Q4: the
			// command line named its --reason flag where the API
			// looked at the call first): the decision's form, then
			// the call.
			for _, c := range []struct{ call, decision, reason, want string }{
				{"nosuch", "deny", "", "a denial needs a reason: the model is told it"},
				{"nosuch", "approve", "x", "does not wait for call nosuch (decided already, or never asked); it waits for:"},
			} {
				if refusal := d.decide(t, run.ID, c.call, c.decision, c.reason); !strings.Contains(refusal, c.want) {
					t.Errorf("%s: %s of call %s = %q, want the refusal %q", d.name, c.decision, c.call, refusal, c.want)
				}
			}
			// Each takes the run and the call by a unique prefix of
			// their ids (report 13, P7 and P12: the local MCP tools
			// took whole run ids only, the API, the web UI and MCP
			// whole call ids only).
			call := r.Pending[0].CallID
			if refusal := d.decide(t, run.ID[:12], call[:len(call)-1], decision, "checked by a person"); refusal != "" {
				t.Errorf("%s: %s", d.name, refusal)
				continue
			}
			var got *agent.ApprovalResolved
			for e, err := range cl.Events(t.Context(), run.ID, &client.EventsParams{NoFollow: true}) {
				if err != nil {
					t.Fatal(err)
				}
				if e.Type == journal.ApprovalResolved {
					got = &agent.ApprovalResolved{}
					if err := json.Unmarshal(e.Payload, got); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
			if got == nil {
				t.Errorf("%s: no approval.resolved", d.name)
				continue
			}
			if got.By == "" {
				t.Errorf("%s: the decision names nobody", d.name)
			}
			// Who decided differs: the token's person, or the person
			// at this machine.
			got.By, got.Token = "", ""
			if first == nil {
				first, firstName = got, d.name
				continue
			}
			if diff := cmp.Diff(first, got); diff != "" {
				t.Errorf("approval.resolved of %s differs from %s's (-%s +%s):\n%s", d.name, firstName, firstName, d.name, diff)
			}
		}
	})
}
