package agent

import (
	"unicode/utf8"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
)

// boundResult bounds what the model sees of any tool's result: the
// runtime's safety net behind the tools' own bounds. Content within the
// bound is only sanitised. Longer content is written whole to the
// run's artifact file (in its state directory, or .keel/artifacts/RUN/CALL.out
// of the workspace for older runs) through [tool.Output],
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

// maxReasonChars bounds the reason of a gate decision (the call's, and
// each part's) in the journal and in what the model is told: a schema
// error echoes the value it rejects, which can be as large as the model
// made it (a 200 KB todo item).
const maxReasonChars = 2000

// boundDecided clips the reasons of d to maxReasonChars characters each
// (head and tail, with a marker), so that gate.decided stays small
// whatever the arguments; it returns d.
func boundDecided(d *GateDecided) *GateDecided {
	d.Decision.Reason = clipMiddle(tool.Sanitize(d.Decision.Reason), maxReasonChars)
	for i := range d.Decision.Parts {
		d.Decision.Parts[i].Reason = clipMiddle(d.Decision.Parts[i].Reason, maxReasonChars)
		d.Decision.Parts[i].Detail = clipMiddle(d.Decision.Parts[i].Detail, maxReasonChars)
	}
	return d
}

// request builds the next model request (see [BuildRequest]) and saves
// the whole content of each result of the newest turn that the fit cut
// and that has no artifact yet, to the file the request names
// ([ResultArtifact]), so that the model can read the rest. The file's
// content is the tool.finished event's, so the journal already holds
// it. A result that cannot be saved (no workspace, or it fails) is
// fitted again naming no file.
func (x *executor) request() (*model.Request, int) {
	var ws *tool.Workspace
	if x.p.Env != nil {
		ws = x.p.Env.Workspace
	}
	failed := map[string]bool{}
	canSave := func(id string) bool { return ws != nil && !failed[id] }
	req, est, save := fittedRequest(x.st, x.p.MaxOutputTokens, canSave)
	for _, c := range save {
		out := tool.NewOutput(ws, x.runID, c.ID, 1)
		_, _ = out.Write([]byte(c.Finished.Content))
		_ = out.Close()
		if out.Artifact() != x.st.ResultArtifact(c.ID) {
			failed[c.ID] = true
		}
	}
	if len(failed) > 0 {
		req, est, _ = fittedRequest(x.st, x.p.MaxOutputTokens, canSave)
	}
	return req, est
}
