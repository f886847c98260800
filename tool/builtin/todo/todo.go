// Package todo provides Keel's "todo" tool: the model's plan for its
// task, a list of items that are pending, in progress or done.
//
// Arguments: {"items": [{"content": string, "status": "pending" |
// "in_progress" | "done"}]}. Each call replaces the whole list. The tool
// has no side effect: the plan lives in the journal, where the runtime
// folds it from the newest successful call (agent.PlanTool, agent.Plan),
// shows it in `keel runs show`, and repeats it with every compaction
// summary, so the plan survives compaction. The result renders the plan
// with a count of each status.
package todo

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/keel-run/keel/tool"
)

// Name is the tool's name (agent.PlanTool).
const Name = "todo"

// Item statuses.
const (
	Pending    = "pending"
	InProgress = "in_progress"
	Done       = "done"
)

// Limits of one plan.
const (
	// MaxItems bounds the items of a plan.
	MaxItems = 50
	// MaxContent bounds one item's text, in characters.
	MaxContent = 300
)

//go:embed todo.md
var description string

// Item is one entry of the plan.
type Item struct {
	Content string `json:"content"`
	Status  string `json:"status"`
}

// input is the tool's arguments object.
type input struct {
	Items []Item `json:"items"`
}

var schema = fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "items": {
      "type": "array",
      "maxItems": %d,
      "items": {
        "type": "object",
        "additionalProperties": false,
        "properties": {
          "content": {"type": "string", "minLength": 1, "maxLength": %d},
          "status": {"enum": ["pending", "in_progress", "done"]}
        },
        "required": ["content", "status"]
      }
    }
  },
  "required": ["items"]
}`, MaxItems, MaxContent)

// New returns the todo tool and its handler without registering them.
func New() (*tool.Tool, tool.Handler) {
	t := &tool.Tool{
		Name:        Name,
		Description: strings.TrimSpace(description),
		InputSchema: json.RawMessage(schema),
		Effect:      tool.ReadOnly,
		Idempotent:  true,
		Scope:       func(json.RawMessage) []string { return []string{} },
	}
	return t, handle
}

// Register adds the todo tool to r. It panics if r already has a tool
// named "todo".
func Register(r *tool.Registry) {
	t, h := New()
	r.Add(t, h)
}

func handle(_ context.Context, req *tool.Request) (*tool.Result, error) {
	var in input
	if err := json.Unmarshal(req.Arguments, &in); err != nil {
		return tool.Errorf("invalid arguments for todo: %v", err), nil
	}
	counts := map[string]int{}
	inProgress := 0
	for i, it := range in.Items {
		if strings.TrimSpace(it.Content) == "" {
			return tool.Errorf("item %d has no content", i+1), nil
		}
		counts[it.Status]++
		if it.Status == InProgress {
			inProgress++
		}
	}
	return tool.Text(Render(in.Items, counts, inProgress)), nil
}

// Render returns the result text for a plan: a count line, then one line
// per item ("[x]" done, "[>]" in progress, "[ ]" pending).
func Render(items []Item, counts map[string]int, inProgress int) string {
	var b strings.Builder
	if len(items) == 0 {
		b.WriteString("Plan cleared (no items).")
		return b.String()
	}
	fmt.Fprintf(&b, "Plan updated: %d items (%d done, %d in progress, %d pending).\n", len(items), counts[Done], counts[InProgress], counts[Pending])
	for _, it := range items {
		switch it.Status {
		case Done:
			b.WriteString("[x] ")
		case InProgress:
			b.WriteString("[>] ")
		default:
			b.WriteString("[ ] ")
		}
		b.WriteString(strings.TrimSpace(it.Content))
		b.WriteByte('\n')
	}
	if inProgress > 1 {
		fmt.Fprintf(&b, "Note: %d items are in progress; finish one before starting the next.\n", inProgress)
	}
	return strings.TrimRight(b.String(), "\n")
}
