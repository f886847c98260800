package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// failure is what Main reports for err, the error of a command, in both
// forms alike: the text after "keel: " and the exit status. A refusal of
// the service (local) or of a team server's API (--server, the same
// refusals through the Go client) is reported by its message alone (the
// API's code is for programs: client.IsCode, errors.As) and its code
// gives the exit status, so the two forms cannot drift per command:
//
//   - 2, the command line names something wrong and nothing ran: a usage
//     error, a request refused as invalid (invalid_request), a name that
//     names nothing (not_found: a run, schedule, trigger, agent...), an
//     input the run does not wait for (no_input);
//   - 1, anything else: the command failed.
//
// A RUN argument that names no run (resolveRunArgs) is reported as such,
// with the command that lists the runs, whatever the command then failed
// on when it looked the run up.
func (a *app) failure(err error) (string, int) {
	if ref, ok := a.missingRun(err); ok {
		return fmt.Sprintf("no run %q (`%s runs list` shows the runs)", ref, a.keelFor()), 2
	}
	var ue *usageError
	var aue *assemble.UsageError
	// cobra's own "unknown command" (keel lsit) is found before any of
	// our checks run.
	if errors.As(err, &ue) || errors.As(err, &aue) || strings.HasPrefix(err.Error(), "unknown command ") {
		return err.Error(), 2
	}
	switch errorCode(err) {
	case api.CodeInvalidRequest, api.CodeNotFound, api.CodeNoInput:
		return err.Error(), 2
	}
	return err.Error(), 1
}

// errorCode is the API code of err, a refusal of the service or of a
// team server ("": neither).
func errorCode(err error) string {
	var se *service.Error
	var ae *api.Error
	switch {
	case errors.As(err, &se):
		return se.Code
	case errors.As(err, &ae):
		return ae.Code
	}
	return ""
}

// missingRun returns the RUN argument that names no run, if err is the
// failure to find it: the journal's, the service's or the server's "not
// found".
func (a *app) missingRun(err error) (string, bool) {
	if len(a.missingRuns) == 0 || !errors.Is(err, journal.ErrNotFound) && !errors.Is(err, errRunNotFound) && errorCode(err) != api.CodeNotFound {
		return "", false
	}
	for _, ref := range a.missingRuns {
		if strings.Contains(err.Error(), ref) {
			return ref, true
		}
	}
	return a.missingRuns[0], true
}

// checkRuns refuses a command given a RUN argument that names no run, for
// a command that would otherwise find out in its own terms (approve: "waits
// for no approval"). Call it after the command's own flags are checked.
func (a *app) checkRuns() error {
	if len(a.missingRuns) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w", a.missingRuns[0], errRunNotFound)
}

// keelFor is the command a hint names: keel with the --server or --db of
// this invocation.
func (a *app) keelFor() string {
	if u := a.serverURL(); u != "" {
		return "keel --server " + strings.TrimRight(u, "/")
	}
	return a.keelCmd()
}
