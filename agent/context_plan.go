package agent

import (
	"encoding/json"
	"fmt"
	"strings"
)

// PlanTool is the name of the tool whose successful calls set the run's
// plan (see tool/builtin/todo): the plan is the items argument of the
// newest such call. Because it is folded from the journal and shown with
// every compaction summary, the plan survives compaction.
const PlanTool = "todo"

// Plan item statuses.
const (
	PlanPending    = "pending"
	PlanInProgress = "in_progress"
	PlanDone       = "done"
)

// PlanItem is one entry of a run's plan.
type PlanItem struct {
	Content string `json:"content"`
	// Status is [PlanPending], [PlanInProgress] or [PlanDone].
	Status string `json:"status"`
}

// Plan returns the run's current plan (nil when the model has set none).
// The slice is shared; do not modify it.
func (s *State) Plan() []PlanItem { return s.ctx.plan }

// ParsePlan decodes the arguments of a [PlanTool] call,
// {"items": [{"content": ..., "status": ...}]}. It returns an error for
// arguments of another shape or an unknown status.
func ParsePlan(args []byte) ([]PlanItem, error) {
	var in struct {
		Items []PlanItem `json:"items"`
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, fmt.Errorf("agent: plan: %w", err)
	}
	for i, it := range in.Items {
		switch it.Status {
		case PlanPending, PlanInProgress, PlanDone:
		default:
			return nil, fmt.Errorf("agent: plan item %d: status %q, want pending, in_progress or done", i+1, it.Status)
		}
	}
	if in.Items == nil {
		in.Items = []PlanItem{}
	}
	return in.Items, nil
}

// RenderPlan renders items one per line: "[x] done", "[>] in progress",
// "[ ] pending".
func RenderPlan(items []PlanItem) string {
	if len(items) == 0 {
		return "(empty plan)"
	}
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteByte('\n')
		}
		switch it.Status {
		case PlanDone:
			b.WriteString("[x] ")
		case PlanInProgress:
			b.WriteString("[>] ")
		default:
			b.WriteString("[ ] ")
		}
		b.WriteString(strings.TrimSpace(it.Content))
	}
	return b.String()
}

// notePlan folds a result of the plan tool into the plan.
func (s *State) notePlan(p *ToolFinished) {
	if p.Tool != PlanTool || p.IsError || p.Synthetic {
		return
	}
	c := s.call(p.CallID)
	if c == nil {
		return
	}
	args := []byte(c.Arguments)
	if c.Started != nil && len(c.Started.Arguments) > 0 {
		args = c.Started.Arguments
	}
	if items, err := ParsePlan(args); err == nil {
		s.ctx.plan, s.ctx.planCall = items, p.CallID
	}
}
