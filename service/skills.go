package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/skill"
	"github.com/keel-run/keel/tool"
)

// Skills (docs/skills.md): the skills a run in a workspace is offered,
// one skill's files and instructions, installing from a discovery index,
// and the agent-written candidates. A caller sees what the runs it may
// create would be offered: an admin (and the command line on the
// journal's machine) every skill found, a token bound to agents those the
// service's policy lets one of its agents load, in workspaces under the
// workspace roots. Only an admin installs.

// SkillHost is where a service's skills live: Keel's home directory on
// the machine of the service (the user's skills, the store of installed
// and approved ones, the trusted lockfiles). The command line implements
// it; the service reads no files of its own.
type SkillHost interface {
	// Library returns where a run in workspace ws ("" for none) finds
	// its skills, signatures verified.
	Library(ws string) *skill.Library
	// StoreDir is the store skills are installed in (NAME/HEX).
	StoreDir() string
	// Pin pins p in the lockfile of workspace ws and trusts the new
	// content (the person who installed it wrote it).
	Pin(ws string, p skill.Pinned) error
}

// OfferSkills fixes in c the skills offered to the run (c.Skills): those
// lib finds, each verified, that eng lets the run's agent load
// (skill_load), with scripts where eng lets them run (skill_scripts). It
// returns what was not offered and why (a changed or unverifiable pinned
// skill, an untrusted lockfile, a skill the policy does not offer).
func OfferSkills(ctx context.Context, c *agent.RunCreated, eng *policy.Engine, lib *skill.Library) []error {
	found, errs := lib.Find()
	k := &agent.Skills{}
	for _, f := range found {
		if e := skillDecision(ctx, eng, c, &f, policy.SkillLoadTool); e != policy.Allow {
			errs = append(errs, fmt.Errorf("skill %s is not offered: the policy's decision on loading it is %s", f.Name, e))
			continue
		}
		o := agent.OfferedSkill{Name: f.Name, Description: f.Description, Digest: f.Digest, Source: f.Source, Dir: f.Dir,
			Signed: f.Pinned != nil && f.Pinned.Signature != nil}
		o.Scripts = f.Scripts() && skillDecision(ctx, eng, c, &f, policy.SkillScriptsTool) == policy.Allow
		k.Entries = append(k.Entries, o)
	}
	if len(k.Entries) > 0 {
		k.Tokens = agent.LookupFamily(c.Model).TextTokens(k.Section())
		c.Skills = k
	}
	return errs
}

// skillDecision is eng's decision on t (skill_load or skill_scripts) for
// skill f in the run c.
func skillDecision(ctx context.Context, eng *policy.Engine, c *agent.RunCreated, f *skill.Found, t string) policy.Effect {
	args := map[string]any{"name": f.Name, "digest": f.Digest, "source": f.Source}
	if f.Pinned != nil {
		args["signed"] = f.Pinned.Signature != nil
		args["agent_written"] = f.Source == skill.SourceAgent
		args["approved"] = f.Pinned.Scripts || f.Source == skill.SourceAgent
	}
	b, _ := json.Marshal(args)
	return eng.Decide(ctx, &policy.Call{Principal: c.Principal, OnBehalfOf: c.OnBehalfOf, Tool: t, Effect: tool.ReadOnly.String(),
		Arguments: b, Workspace: c.Workspace, MountPath: c.MountPath, Sandbox: c.Sandbox, Network: c.Network}).Effect
}

// skillsWorkspace checks the workspace of a skills request: "" (the
// user's skills only) or a directory runs of who may work in.
func (s *Service) skillsWorkspace(who *Caller, ws string) (string, error) {
	if s.opts.Skills == nil {
		return "", unavailable("this server keeps no skills")
	}
	if ws == "" {
		return "", nil
	}
	return s.conf.checkWorkspace(ws, !who.Local)
}

// visibleSkills returns the skills of workspace ws (checked) who may
// see, and what was refused.
func (s *Service) visibleSkills(ctx context.Context, who *Caller, ws string) ([]skill.Found, []error, error) {
	ws, err := s.skillsWorkspace(who, ws)
	if err != nil {
		return nil, nil, err
	}
	found, errs := s.opts.Skills.Library(ws).Find()
	if who.admin() {
		return found, errs, nil
	}
	var out []skill.Found
	for _, f := range found {
		// What a run of one of its agents here would be offered.
		if slices.ContainsFunc(who.Agents, func(ag string) bool {
			c := &agent.RunCreated{Principal: ag, Workspace: ws, MountPath: "/workspace", Sandbox: s.sandboxKind()}
			return skillDecision(ctx, s.opts.Policy, c, &f, policy.SkillLoadTool) == policy.Allow
		}) {
			out = append(out, f)
		}
	}
	// What was refused names files of the server: an admin's business.
	return out, nil, nil
}

// Skills lists the skills a run in workspace ws ("" for none: the
// user's skills of the server only) would be offered, verified, with
// what was refused (admins only).
func (s *Service) Skills(ctx context.Context, who *Caller, ws string) (api.SkillList, error) {
	found, errs, err := s.visibleSkills(ctx, who, ws)
	if err != nil {
		return api.SkillList{}, err
	}
	out := api.SkillList{Skills: []api.Skill{}}
	for _, f := range found {
		out.Skills = append(out.Skills, skillView(&f))
	}
	for _, e := range errs {
		out.Refused = append(out.Refused, e.Error())
	}
	return out, nil
}

// Skill returns skill name of workspace ws as [Service.Skills] finds
// it: its files with their digests and its instructions.
func (s *Service) Skill(ctx context.Context, who *Caller, ws, name string) (api.SkillDetail, error) {
	found, _, err := s.visibleSkills(ctx, who, ws)
	if err != nil {
		return api.SkillDetail{}, err
	}
	i := slices.IndexFunc(found, func(f skill.Found) bool { return f.Name == name })
	if i < 0 {
		where := "the server's own skills"
		if ws != "" {
			where = "workspace " + ws
		}
		return api.SkillDetail{}, notFound("no skill %q is offered to runs in %s", name, where)
	}
	f := &found[i]
	d := api.SkillDetail{Skill: skillView(f), Instructions: f.Body}
	for _, x := range f.Files {
		d.FileList = append(d.FileList, api.SkillFile{Path: x.Path, Digest: x.Digest})
	}
	return d, nil
}

// InstallSkill installs a skill from a discovery index into the host's
// store (every digest and the archive-safety rules checked, or nothing
// is stored) and pins it in the workspace's lockfile. Admins only.
func (s *Service) InstallSkill(ctx context.Context, who *Caller, req *api.InstallSkill) (api.Skill, error) {
	if !who.admin() {
		return api.Skill{}, forbidden("only an admin installs skills")
	}
	if req.URL == "" || req.Name == "" || req.Workspace == "" {
		return api.Skill{}, badRequest("install needs url, name and workspace (the project whose lockfile pins the skill)")
	}
	if err := skill.CheckName(req.Name); err != nil {
		return api.Skill{}, badRequest("%v", err)
	}
	ws, err := s.skillsWorkspace(who, req.Workspace)
	if err != nil {
		return api.Skill{}, err
	}
	sk, err := skill.Install(ctx, &skill.InstallParams{URL: req.URL, Name: req.Name, Dir: s.opts.Skills.StoreDir()})
	if errors.Is(err, skill.ErrRefused) {
		return api.Skill{}, badRequest("%v (nothing was installed)", err)
	}
	if err != nil {
		return api.Skill{}, badRequest("install %s from %s: %v", req.Name, req.URL, err)
	}
	p := skill.Pinned{Name: sk.Name, Digest: sk.Digest, Source: skill.SourceIndex, URL: req.URL, Scripts: req.AllowScripts}
	if err := s.opts.Skills.Pin(ws, p); err != nil {
		return api.Skill{}, err
	}
	s.logger.Info("skill installed", "skill", sk.Name, "digest", sk.Digest, "workspace", ws, "by", who.Name)
	v := skillView(&skill.Found{Skill: sk, Source: skill.SourceIndex, Pinned: &p})
	v.Lockfile = filepath.Join(ws, skill.LockFile)
	return v, nil
}

// skillView is f as the API shows it.
func skillView(f *skill.Found) api.Skill {
	v := api.Skill{Name: f.Name, Description: f.Description, Digest: f.Digest, Source: f.Source, Scripts: f.Scripts(), Files: len(f.Files)}
	if p := f.Pinned; p != nil {
		v.URL, v.ScriptsAllowed = p.URL, p.Scripts
		if sig := p.Signature; sig != nil {
			v.Signed = &api.SkillSignature{Agent: sig.Agent, Version: sig.Version, ApprovedBy: sig.ApprovedBy}
		}
	}
	return v
}

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
