package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/keel-run/keel/server/api"
)

// SkillCandidates lists the agent-written skill candidates the token
// sees, with their evidence, oldest first.
func (c *Client) SkillCandidates(ctx context.Context) ([]api.SkillCandidate, error) {
	var out api.SkillCandidateList
	return out.Candidates, c.do(ctx, http.MethodGet, "/v1/skills/candidates", nil, nil, &out)
}

// Skills lists the skills a run in workspace ws (a directory on the
// server; "" for the server's own skills only) would be offered,
// verified, as the token sees them.
func (c *Client) Skills(ctx context.Context, ws string) (*api.SkillList, error) {
	q := url.Values{}
	if ws != "" {
		q.Set("workspace", ws)
	}
	var out api.SkillList
	return &out, c.do(ctx, http.MethodGet, "/v1/skills", q, nil, &out)
}

// Skill returns one skill as [Client.Skills] finds it, with its files
// and instructions.
func (c *Client) Skill(ctx context.Context, ws, name string) (*api.SkillDetail, error) {
	q := url.Values{}
	if ws != "" {
		q.Set("workspace", ws)
	}
	var out api.SkillDetail
	return &out, c.do(ctx, http.MethodGet, "/v1/skills/"+url.PathEscape(name), q, nil, &out)
}

// InstallSkill installs a skill from a discovery index on the server and
// pins it in a workspace's lockfile there (an admin token).
func (c *Client) InstallSkill(ctx context.Context, req *api.InstallSkill) (*api.Skill, error) {
	var out api.Skill
	return &out, c.do(ctx, http.MethodPost, "/v1/skills", nil, req, &out)
}
