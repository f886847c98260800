package service

import (
	"context"
	"slices"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/skill"
)

// SkillCandidates lists the agent-written skill candidates who may see,
// oldest first, with their evidence: an admin (and the command line on
// the journal's machine) every one, a token those its agents proposed.
func (s *Service) SkillCandidates(ctx context.Context, who *Caller) ([]api.SkillCandidate, error) {
	list, err := skill.NewCandidates(s.rt.Store(), nil).List(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.SkillCandidate{}
	for _, c := range list {
		if !who.admin() && !slices.Contains(who.Agents, c.Agent) {
			continue
		}
		v := api.SkillCandidate{Name: c.Name, Digest: c.Digest, State: c.State, Run: c.Run, Call: c.Call, Agent: c.Agent, Tests: len(c.Results), Reason: c.Reason}
		for _, r := range c.Results {
			if r.ExitCode == 0 {
				v.TestsPassed++
			}
		}
		if cmp := c.Comparison; cmp != nil {
			v.Evidence, v.Beats = cmp.Why, cmp.Beats
		}
		if a := c.Approval; a != nil {
			v.ApprovedBy, v.Version = a.ApprovedBy, a.Version
		}
		out = append(out, v)
	}
	return out, nil
}
