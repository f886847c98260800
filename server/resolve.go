package server

import (
	"net/http"
	"strings"

	"github.com/keel-run/keel/service"
)

// resolveRun replaces the {id} of a request to a run's route (the API's
// /v1/runs/{id}/..., the web UI's pages and forms of a run) with the
// whole id it names (service.ResolveRun, every front end's rule): a
// unique prefix, or the shortened form the web UI shows, reach the same
// run as its id.
func (h *Handler) resolveRun(r *http.Request) error {
	if !strings.Contains(r.Pattern, "/runs/{id}") && !strings.Contains(r.Pattern, "/approvals/{id}/") && !strings.Contains(r.Pattern, "/inputs/{id}/") {
		return nil
	}
	id, err := service.ResolveRun(r.Context(), h.rt.Store(), r.PathValue("id"), "")
	if err != nil {
		return err
	}
	r.SetPathValue("id", id)
	return nil
}
