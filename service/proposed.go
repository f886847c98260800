package service

import (
	"context"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/fs"
	"github.com/keel-run/keel/visible"
)

// ProposedEdit returns what the call callID of run id, waiting for a
// person's approval, would change if it is an edit_file or write_file
// call (api.ProposedEdit; empty for another tool's call), read from the
// run's workspace now, as who may see it. The terminal's prompt of a run
// on a team server shows it as the prompt of a local run does.
func (s *Service) ProposedEdit(ctx context.Context, who *Caller, id, callID string) (api.ProposedEdit, error) {
	run, err := s.Run(ctx, who, id)
	if err != nil {
		return api.ProposedEdit{}, err
	}
	for _, ap := range run.Pending {
		if ap.CallID == callID {
			return s.EditOf(ctx, ap), nil
		}
	}
	return api.ProposedEdit{}, conflict(api.CodeNoApproval, "run %s waits for no approval of call %s", id, visible.String(callID))
}

// EditOf is [Service.ProposedEdit] of an approval its caller has listed
// already (the web UI's inbox): the file is read as the run's file tools
// see it (a path the run's policy denies, or a link to one, is refused,
// its content never read), and the run's secrets this process holds are
// sealed.
func (s *Service) EditOf(ctx context.Context, a api.Approval) api.ProposedEdit {
	if a.Tool != fs.WriteName && a.Tool != fs.EditName || a.Workspace == "" {
		return api.ProposedEdit{}
	}
	c, err := s.Created(ctx, a.RunID)
	if err != nil {
		return api.ProposedEdit{Problem: "the run cannot be read: " + err.Error()}
	}
	denied, err := agent.DeniedPaths(c)
	if err != nil {
		return api.ProposedEdit{Problem: "the run's policy cannot be read: " + err.Error()}
	}
	ws, err := tool.NewWorkspace(c.Workspace, "", nil)
	if err != nil {
		return api.ProposedEdit{Problem: "the workspace is not available: " + err.Error()}
	}
	defer ws.Close()
	ws.Hide(denied)
	path, before, after, problem, ok := fs.PreviewIn(ws, a.Tool, a.Arguments)
	if !ok {
		return api.ProposedEdit{}
	}
	if problem != "" {
		return api.ProposedEdit{Diff: &api.FileDiff{Path: path}, Problem: problem}
	}
	ch := checkpoint.SealSecrets([]checkpoint.Change{checkpoint.FileDiff(path, before, after)}, s.RunSecrets(c))[0]
	return api.ProposedEdit{Diff: &api.FileDiff{Path: ch.Path, Status: string(ch.Status), Binary: ch.Binary, Patch: ch.Patch, Added: ch.Added, Removed: ch.Removed,
		Denied: ch.Denied, Hidden: ch.Hidden, Rewritten: ch.Rewritten, Ignored: ch.Ignored, Files: ch.Files, Autorun: ch.Autorun, Link: ch.Link, Note: ch.Note, NULs: ch.NULs, Later: ch.Later}}
}
