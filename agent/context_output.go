package agent

import (
	"unicode/utf8"

	"github.com/keel-run/keel/tool"
)

// boundResult bounds what the model sees of any tool's result: the
// runtime's safety net behind the tools' own bounds. Content within the
// bound is only sanitised. Longer content is written whole to the
// workspace artifact .keel/artifacts/RUN/CALL.out through [tool.Output],
// and the result shows its head and tail and names the artifact, so the
// journal links the result to the whole output. A result that already
// names an artifact (its tool saved the whole output) is only cut.
func (x *executor) boundResult(r *tool.Result, callID string) {
	limit := x.maxChars()
	content := tool.Sanitize(r.Content)
	if utf8.RuneCountInString(content) <= limit {
		r.Content = content
		return
	}
	if r.Artifact != "" || x.p.Env.Workspace == nil {
		r.Content = boundText(content, limit)
		return
	}
	out := tool.NewOutput(x.p.Env.Workspace, x.runID, callID, limit)
	_, _ = out.Write([]byte(r.Content))
	_ = out.Close()
	if r.OutputBytes == 0 {
		r.OutputBytes = out.Bytes()
	}
	r.Content, r.Artifact = out.View(), out.Artifact()
}
