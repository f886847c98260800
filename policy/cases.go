package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Case is one test case of a policy file ([[test]] in the TOML format): a
// call and the decision the policy must reach for it.
type Case struct {
	Name string
	// Tool and Args are the call (Args a JSON object).
	Tool string
	Args json.RawMessage
	// Paths are the resolved workspace-relative paths of a file tool's
	// call; when empty, Args' "path" is used.
	Paths                 []string
	Principal, OnBehalfOf string
	// Network is the run's host allowlist; Sandbox its backend ("linux"
	// unless set); Mount its mount path ("/workspace" unless set);
	// Workspace its host directory (with Sandbox "none", commands see the
	// host, and paths are resolved against it; unset, the mount path
	// stands for it).
	Network   []string
	Sandbox   string
	Mount     string
	Workspace string
	// Holds names the secret variables the run's sandbox holds
	// (--secret-env): the call carries one when its arguments name it.
	// Untrusted, when set, says what brought untrusted input into the
	// run; Unattended, that nobody attends it. Together they are the
	// call's information flow (see [Flow]), which the runtime fills from
	// the run's journal.
	Holds      []string
	Untrusted  string
	Unattended bool
	// OutputOut says the run's output reaches people who may not hold
	// its secrets (see [Flow].OutputOut).
	OutputOut bool
	// Expect is the call's expected decision; Parts, if given, the
	// expected decision of each part in order.
	Expect Effect
	Parts  []Effect
}

// Call returns the call c describes.
func (c *Case) Call() *Call {
	call := &Call{RunID: "test", CallID: "test", Principal: c.Principal, OnBehalfOf: c.OnBehalfOf, Tool: c.Tool,
		Effect: toolEffect(c.Tool), Arguments: c.Args, Paths: c.Paths, MountPath: c.Mount, Sandbox: c.Sandbox, Network: c.Network,
		Workspace: c.Workspace}
	if call.Principal == "" {
		call.Principal = "keel-cli"
	}
	if call.Sandbox == "" {
		call.Sandbox = "linux"
	}
	if call.MountPath == "" {
		call.MountPath = "/workspace"
	}
	if len(c.Holds) > 0 || c.Untrusted != "" || c.Unattended || c.OutputOut {
		fl := &Flow{Held: c.Holds, Untrusted: c.Untrusted, Unattended: c.Unattended, OutputOut: c.OutputOut}
		for _, name := range c.Holds {
			if refersTo(string(c.Args), name) || c.Tool == "bash" && refersTo(ResolvedWords(c.Args), name) {
				fl.Secrets = append(fl.Secrets, SecretUse{Name: name, Form: "by reference", Where: "arguments"})
			} else if c.Tool == "bash" && DumpsEnvironment(c.Args) {
				fl.Secrets = append(fl.Secrets, SecretUse{Name: name, Form: "in a dump of the whole environment", Where: "arguments"})
			}
		}
		if len(c.Holds) > 0 {
			fl.Private, fl.PrivateOther = "the sandbox holds secret "+strings.Join(c.Holds, ", "), true
		}
		call.Flow = fl
	}
	if len(call.Paths) == 0 && c.Tool != "bash" && c.Tool != "fetch_url" && c.Tool != "http_request" {
		var in struct {
			Path string `json:"path"`
		}
		if json.Unmarshal(c.Args, &in) == nil && in.Path != "" {
			call.Paths = []string{strings.TrimPrefix(path.Clean(strings.TrimPrefix(in.Path, call.MountPath)), "/")}
		}
	}
	return call
}

// toolEffect returns the effect class of Keel's built-in tools, for test
// cases; unknown tools count as external.
func toolEffect(tool string) string {
	switch tool {
	case "read_file", "list_directory", "search_files":
		return "read_only"
	case "write_file", "edit_file":
		return "workspace_write"
	}
	return "external"
}

// CaseResult is the outcome of one [Case].
type CaseResult struct {
	Case Case
	Got  Decision
	// Problem is empty when the case passed, else what differed.
	Problem string
}

// Cases returns the policy file's test cases.
func (e *Engine) Cases() []Case { return slices.Clone(e.cases) }

// Test runs the policy file's own test cases and returns one result per
// case, in file order.
func (e *Engine) Test(ctx context.Context) []CaseResult {
	out := make([]CaseResult, 0, len(e.cases))
	for _, c := range e.cases {
		out = append(out, e.RunCase(ctx, &c))
	}
	return out
}

// CheckCases runs the policy file's own test cases: nil when every one
// passes, else an error that counts those that fail and lists them, one
// "NAME: PROBLEM" a line, in file order. A policy whose cases fail is
// refused wherever one is given for runs (keel run --policy, keel serve,
// an API request's policy).
func (e *Engine) CheckCases(ctx context.Context) error {
	var failed []string
	for _, r := range e.Test(ctx) {
		if r.Problem != "" {
			failed = append(failed, r.Case.Name+": "+r.Problem)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%d of its test cases fail:\n  %s", len(failed), strings.Join(failed, "\n  "))
}

// RunCase evaluates one case and reports whether the decision is the
// expected one.
func (e *Engine) RunCase(ctx context.Context, c *Case) CaseResult {
	d := e.Decide(ctx, c.Call())
	r := CaseResult{Case: *c, Got: d}
	var problems []string
	if d.Effect != c.Expect {
		problems = append(problems, fmt.Sprintf("decision %s, want %s (%s)", d.Effect, c.Expect, d.Reason))
	} else if p := evalProblem(&d); p != "" {
		// The expected deny came from a broken rule, not from the rules.
		problems = append(problems, "the decision is right only because "+p)
	}
	if len(c.Parts) > 0 {
		got := make([]Effect, len(d.Parts))
		for i, p := range d.Parts {
			got[i] = p.Effect
		}
		if !slices.Equal(got, c.Parts) {
			problems = append(problems, fmt.Sprintf("parts %v, want %v", got, c.Parts))
		}
	}
	r.Problem = strings.Join(problems, "; ")
	return r
}

// refersTo reports whether args name the variable name as a word (a
// command's $NAME or ${NAME}, code's os.environ["NAME"]), as the
// runtime's scanner does.
func refersTo(args, name string) bool {
	return regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(name) + `($|[^A-Za-z0-9_])`).MatchString(args)
}
