package agent

import (
	"github.com/keel-run/keel/tool"
)

// maxHiddenArtifact bounds the whole output of a call that a run holding
// secrets keeps: it is redacted in memory, so a larger one is not kept.
const maxHiddenArtifact = 256 << 20

// hideInArtifact redacts the run's secrets in the whole output r names
// (its tool saved it while the call ran, before any redaction): the
// model reads that file, `keel runs show --full` prints it and the API
// serves it. One that cannot be redacted is removed, and r says so.
func (x *executor) hideInArtifact(r *tool.Result) {
	if x.secrets == nil || r.Artifact == "" || x.p.Env == nil || x.p.Env.Workspace == nil {
		return
	}
	kept, err := tool.HideInArtifact(x.p.Env.Workspace, r.Artifact, x.secrets.hide, maxHiddenArtifact)
	if err != nil {
		x.rt.logger.Warn("whole output: hiding the run's secrets", "run_id", x.runID, "artifact", r.Artifact, "error", err)
	}
	if kept {
		return
	}
	r.Content += "\n[the whole output named above was not kept: the run holds secrets, and it could not be checked for them]"
	r.Artifact = ""
}
