package agent

import "github.com/keel-run/keel/tool"

// ToolInfos describes the tools of r as [RunCreated.Tools] holds them:
// sorted by name, each with its schema, effect class, idempotence and,
// for an external tool, its server and pinned definition. A run offers
// the model exactly these tools, on every resume too.
func ToolInfos(r *tool.Registry) []ToolInfo {
	var out []ToolInfo
	for _, s := range r.Specs() {
		t := r.Tool(s.Name)
		out = append(out, ToolInfo{ToolSpec: s, Effect: t.Effect.String(), Idempotent: t.Idempotent, Server: t.Server, Pin: t.Pin})
	}
	return out
}
