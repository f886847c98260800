package cli_test

import (
	"strings"
	"testing"
)

// A run whose journaled settings would hold one of its secrets is
// refused before anything is journaled: the task, an --env value (also
// the value inside a URL), or the variable given both as --env and as a
// secret (new-user trial 19, R5 and R6: run.created held the value in
// clear for every reader, or named a value the sandbox never had).
func TestSecretValueNotInSettings(t *testing.T) {
	db := setup(t)
	const canary = "TASKCANARY9z8y7x6w5v4u"
	t.Setenv("CANARY_TOKEN", canary)
	traj := writeTrajectory(t, "one step", []fcall{sh("true")}, nil)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"in the task", []string{"the token is " + canary + ", use it"}, "the task holds the value of the run's secret CANARY_TOKEN"},
		{"in an env value", []string{"--env", "DATABASE_URL=postgres://u:" + canary + "@db/x", "t"}, "the value of environment variable DATABASE_URL (--env, env) holds the value of the run's secret CANARY_TOKEN"},
		{"given twice", []string{"--env", "CANARY_TOKEN=other", "t"}, "environment variable CANARY_TOKEN is given twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"run", "--sandbox", "none", "--model", "replay:" + traj, "--workspace", t.TempDir(), "--secret-env", "CANARY_TOKEN"}, tt.args...)
			code, _, errOut := keel(t, args...)
			if code != 2 || !strings.Contains(errOut, tt.want) || strings.Contains(errOut, canary) {
				t.Errorf("keel run = %d, want 2 saying %q without the value:\n%s", code, tt.want, errOut)
			}
		})
	}
	if _, out, _ := keel(t, "--db", db, "runs", "list"); strings.Contains(out, "01") {
		t.Errorf("a refused run was journaled:\n%s", out)
	}
	// By name, as a command writes it, the run goes on.
	if code, _, errOut := keel(t, "run", "--sandbox", "none", "--model", "replay:"+traj, "--workspace", t.TempDir(), "--secret-env", "CANARY_TOKEN", "use $CANARY_TOKEN"); code != 0 {
		t.Errorf("a task naming the variable = %d\n%s", code, errOut)
	}
}
