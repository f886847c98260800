package memory

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/tool"
)

// Names of the memory tools.
const (
	SearchTool = agent.MemorySearchTool
	WriteTool  = agent.MemoryWriteTool
)

//go:embed search.md
var searchDescription string

//go:embed write.md
var writeDescription string

// ToolParams are what the memory tools of one run work with.
type ToolParams struct {
	Store *Store
	// Scopes are the run's scopes: the tools read and write these only.
	Scopes Scopes
	// NoSearch leaves memory_search out (a run offered no entry: there
	// is nothing for it to find).
	NoSearch bool
}

type searchInput struct {
	Query string `json:"query"`
	Limit int    `json:"limit,omitempty"`
}

type writeInput struct {
	Text       string `json:"text"`
	Scope      string `json:"scope,omitempty"`
	Supersedes string `json:"supersedes,omitempty"`
	Private    bool   `json:"private,omitempty"`
}

// AddTools registers memory_search (unless p.NoSearch) and memory_write
// in reg. The gate decides memory_write on a Keel::Memory resource whose
// scope attribute is the scope kind (policy/default.toml asks before a
// shared scope).
func AddTools(reg *tool.Registry, p *ToolParams) {
	if !p.NoSearch {
		addSearch(reg, p)
	}
	tool.Add(reg, &tool.Tool{
		Name:        WriteTool,
		Description: strings.TrimSpace(writeDescription),
		InputSchema: []byte(fmt.Sprintf(`{"type":"object","additionalProperties":false,"properties":{"text":{"type":"string","minLength":1,"maxLength":%d},"scope":{"enum":["agent","agent-user","user","project","team"]},"supersedes":{"type":"string","maxLength":100},"private":{"type":"boolean"}},"required":["text"]}`, MaxText)),
		Effect:      tool.External,
		Scope:       func(json.RawMessage) []string { return []string{} },
	}, func(ctx context.Context, req *tool.Request, in writeInput) (*tool.Result, error) {
		kind := in.Scope
		if kind == "" {
			kind = KindAgent
		}
		scope, err := p.Scopes.Resolve(kind)
		if err != nil {
			return tool.Errorf("%v", err), nil
		}
		l := agent.MemoryLabels{Integrity: Trusted, Confidentiality: Public}
		if req.Untrusted {
			l.Integrity = Untrusted
		}
		if in.Private {
			l.Confidentiality = Private
		}
		e, err := p.Store.Write(ctx, &WriteParams{Scope: scope, Text: in.Text, Labels: l, Supersedes: in.Supersedes,
			Source: Source{Run: req.RunID, Call: req.CallID, Agent: req.Principal, User: req.OnBehalfOf}})
		if errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrSuperseded) {
			return tool.Errorf("%v", err), nil
		}
		if err != nil {
			return nil, err
		}
		msg := fmt.Sprintf("kept as [memory:%s] in %s (%s, %s)", e.ID, e.Scope, l.Integrity, l.Confidentiality)
		if e.Supersedes != "" {
			msg += "; it supersedes " + e.Supersedes
		}
		if req.Untrusted {
			msg += "; labelled untrusted because this run has seen untrusted input"
		}
		return tool.Text(msg), nil
	})
}

func quote(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = "> " + l
	}
	return strings.Join(lines, "\n")
}

// addSearch registers memory_search in reg.
func addSearch(reg *tool.Registry, p *ToolParams) {
	tool.Add(reg, &tool.Tool{
		Name:        SearchTool,
		Description: strings.TrimSpace(searchDescription),
		InputSchema: []byte(`{"type":"object","additionalProperties":false,"properties":{"query":{"type":"string","minLength":1,"maxLength":1000},"limit":{"type":"integer","minimum":1,"maximum":20}},"required":["query"]}`),
		Effect:      tool.ReadOnly,
		Scope:       func(json.RawMessage) []string { return []string{} },
	}, func(ctx context.Context, req *tool.Request, in searchInput) (*tool.Result, error) {
		limit := in.Limit
		if limit == 0 {
			limit = 8
		}
		found, err := p.Store.Search(ctx, p.Scopes.List(), in.Query, limit)
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return tool.Text("no memory entry matches " + fmt.Sprintf("%q", in.Query)), nil
		}
		res := &tool.Result{}
		var b strings.Builder
		fmt.Fprintf(&b, "%d entries:\n", len(found))
		for _, e := range found {
			fmt.Fprintf(&b, "\n[memory:%s] (%s; %s, %s", e.ID, e.Scope, e.Labels.Integrity, e.Labels.Confidentiality)
			if e.Source.Run != "" {
				fmt.Fprintf(&b, "; written by run %s", e.Source.Run)
			} else if e.Source.By != "" {
				fmt.Fprintf(&b, "; written by %s", e.Source.By)
			}
			fmt.Fprintf(&b, "; %s)\n%s\n", e.Time.UTC().Format("2006-01-02"), quote(e.Text))
			if e.Labels.Untrusted() {
				res.Untrusted = true
			}
		}
		res.Content = b.String()
		return res, nil
	})
}
