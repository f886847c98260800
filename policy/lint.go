package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// evalFailed starts the reason of a part denied because a policy could
// not be evaluated (see [Engine.Decide]).
const evalFailed = "a policy could not be evaluated (failing closed): "

// probes are ordinary calls of a coding agent that every useful policy
// decides without an evaluation error and does not deny all of.
var probes = []Case{
	{Name: "ls", Tool: "bash", Args: json.RawMessage(`{"command":"ls -la"}`)},
	{Name: "cat README.md", Tool: "bash", Args: json.RawMessage(`{"command":"cat README.md"}`)},
	{Name: "grep -rn TODO src", Tool: "bash", Args: json.RawMessage(`{"command":"grep -rn TODO src | head"}`)},
	{Name: "git status", Tool: "bash", Args: json.RawMessage(`{"command":"git status && git diff"}`)},
	{Name: "echo > notes.txt", Tool: "bash", Args: json.RawMessage(`{"command":"echo hi > notes.txt"}`)},
	{Name: "python3 -m pytest", Tool: "bash", Args: json.RawMessage(`{"command":"python3 -m pytest -q tests/"}`)},
	{Name: "read_file README.md", Tool: "read_file", Args: json.RawMessage(`{"path":"README.md"}`)},
	{Name: "read_file .", Tool: "read_file", Args: json.RawMessage(`{"path":"."}`)},
	{Name: "search_files TODO", Tool: "search_files", Args: json.RawMessage(`{"pattern":"TODO"}`), Paths: []string{"."}},
	{Name: "write_file src/app.py", Tool: "write_file", Args: json.RawMessage(`{"path":"src/app.py","content":"print(1)"}`)},
	{Name: "edit_file src/app.py", Tool: "edit_file", Args: json.RawMessage(`{"path":"src/app.py","old_string":"1","new_string":"2"}`)},
	{Name: "python", Tool: "python", Args: json.RawMessage(`{"code":"print(1)"}`)},
	{Name: "fetch_url docs.python.org", Tool: "fetch_url", Args: json.RawMessage(`{"url":"https://docs.python.org/3/"}`), Network: []string{"docs.python.org"}},
}

// Lint decides a fixed set of ordinary calls (ls, cat, git status, a
// write in the workspace, read_file, write_file, python, fetch_url...),
// in the Linux sandbox and without one, and returns what is wrong with
// the policy whatever its own test cases say: every rule that could not
// be evaluated for one of them (it reads an attribute that does not
// exist: a typo, or a missing `has` guard; such a rule denies every call
// it fails on), and a policy that denies all of them both ways (nothing
// could ever run; a policy may refuse every call without a sandbox).
// Empty means nothing found.
func (e *Engine) Lint(ctx context.Context) []string {
	var out []string
	failing := map[string]bool{}
	denied := 0
	for _, sandbox := range []string{"linux", "none"} {
		for _, p := range probes {
			p.Sandbox = sandbox
			d := e.Decide(ctx, p.Call())
			if d.Effect == Deny {
				denied++
			}
			for _, part := range d.Parts {
				msg, ok := strings.CutPrefix(part.Reason, evalFailed)
				if !ok {
					continue
				}
				for _, id := range part.Policies {
					if !failing[id] {
						failing[id] = true
						out = append(out, fmt.Sprintf("rule %s cannot be evaluated (for %s, sandbox %s: %s); it denies every call it fails on: check the attribute names (docs/policy.md lists them) and guard optional ones with `has`", id, p.Name, sandbox, msg))
					}
				}
			}
		}
	}
	slices.Sort(out)
	if denied == 2*len(probes) {
		names := make([]string, len(probes))
		for i, p := range probes {
			names[i] = p.Name
		}
		out = append(out, fmt.Sprintf("it denies every one of %d ordinary calls (%s), in the sandbox and without one: no run could do anything", len(probes), strings.Join(names, ", ")))
	}
	return out
}

// evalProblem returns the part of d's reasons that says a policy could
// not be evaluated, or "".
func evalProblem(d *Decision) string {
	for _, p := range d.Parts {
		if msg, ok := strings.CutPrefix(p.Reason, evalFailed); ok {
			return fmt.Sprintf("part %d: %s%s", p.Index+1, evalFailed, msg)
		}
	}
	return ""
}
