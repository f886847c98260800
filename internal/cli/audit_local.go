package cli

import (
	"context"

	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/journal"
)

func (l *local) Verify(ctx context.Context, ids []string) ([]auditRow, error) {
	var reports []audit.Report
	if len(ids) == 0 {
		var err error
		if reports, err = audit.VerifyAll(ctx, l.store); err != nil {
			return nil, err
		}
	}
	for _, id := range ids {
		r, err := audit.Verify(ctx, l.store, id)
		if err != nil {
			return nil, err
		}
		reports = append(reports, r)
	}
	rows := make([]auditRow, len(reports))
	for i, r := range reports {
		rows[i] = auditRow{Report: r, Shown: string(r.Status)}
		if r.Status == journal.StatusRunning {
			rows[i].Shown = liveStatus(ctx, l.store, journal.RunSummary{RunID: r.RunID, Status: r.Status})
		}
	}
	return rows, nil
}
