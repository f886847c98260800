package cli

import (
	"context"

	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// Verify asks the server, which verifies its journal (its own running
// runs are executing: it resumes every run it was executing when it
// starts).
func (r *remote) Verify(ctx context.Context, ids []string) ([]auditRow, error) {
	rep, err := r.Client.VerifyAudit(ctx, &api.VerifyAudit{Runs: ids})
	if err != nil {
		return nil, err
	}
	rows := make([]auditRow, 0, len(rep.Journals))
	for _, j := range rep.Journals {
		rows = append(rows, auditRow{Report: audit.Report{RunID: j.ID, Kind: j.Kind, Events: j.Events, OK: j.OK, FirstBad: j.FirstBad, Reason: j.Reason,
			Status: journal.Status(j.Status), Head: j.Head}, Shown: j.Status})
	}
	return rows, nil
}
