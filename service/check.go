package service

import (
	"cmp"
	"context"
	"strings"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/server/api"
)

// FieldError is a problem with one field of a creation request.
type FieldError struct {
	// Field is the field's name in api.CreateRun's JSON: task, model,
	// workspace, mount_path, env, policy, sandbox, limits.
	Field string
	// Message says what is wrong, in the words Create uses.
	Message string
}

// CheckFields checks each field of a creation request for who on its
// own, by the checks [Service.Create] makes, and returns every problem
// it finds, in the order of the fields: a form (the web UI's New run)
// shows them all at once, each at its field, instead of one per try.
// None found, Create may still refuse what needs the whole request (the
// agent, secrets, setting the run up). req is not changed.
func (s *Service) CheckFields(ctx context.Context, who *Caller, req *api.CreateRun) []FieldError {
	var out []FieldError
	add := func(field string, err error) {
		if err != nil {
			e, internal := Classify(s.invalid(err))
			if !internal {
				out = append(out, FieldError{field, e.Message})
			}
		}
	}
	if s.opts.Builder == nil || req.Demo {
		return nil
	}
	a := &admission{who: who}
	// The model gives a replay's task: the task is known to be missing
	// only when the model is known.
	var task string
	taskKnown := false
	switch spec := cmp.Or(req.Model, s.opts.DefaultModel); {
	case spec == "":
		add("model", badRequest("no model: name one (openai:MODEL, anthropic:MODEL, openai-compatible:MODEL@URL, replay:RECORDING, scripted:demo); this server has no default model"))
	default:
		m, err := s.checkModel(a, spec)
		if err != nil {
			add("model", err)
			break
		}
		mi, err := s.opts.Builder.Model(ctx, m)
		if err != nil {
			add("model", err)
			ms, perr := model.ParseSpec(m)
			taskKnown = perr == nil && ms.Provider != "replay"
			break
		}
		task, taskKnown = mi.Task, true
	}
	if strings.TrimSpace(cmp.Or(req.Task, task)) == "" && taskKnown {
		out = append([]FieldError{{"task", "no task"}}, out...)
	}
	_, err := s.conf.checkWorkspace(req.Workspace, !who.Local)
	add("workspace", err)
	if m := req.MountPath; m != "" && !strings.HasPrefix(m, "/") {
		add("mount_path", badRequest("mount_path %q must be absolute", m))
	}
	var bad []string
	for _, e := range req.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			bad = append(bad, e)
		}
	}
	if len(bad) > 0 {
		add("env", badRequest("env %q: want KEY=VALUE", strings.Join(bad, `", "`)))
	}
	if req.Policy != "" {
		eng, err := s.policyOf(ctx, req.Policy, req.PolicyFile)
		if err == nil {
			err = s.lintPolicy(ctx, eng)
		}
		add("policy", err)
	}
	add("sandbox", s.checkSandbox(a, req.Sandbox))
	add("limits", checkLimits(&req.Limits))
	return out
}
