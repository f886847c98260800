package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/skill"
)

// skillPublisher serves a discovery index of skills (name → path →
// content); wrong names skills whose index lists a wrong digest for
// SKILL.md.
func skillPublisher(t *testing.T, skills map[string]map[string]string, wrong ...string) *httptest.Server {
	t.Helper()
	var ix skill.Index
	ix.Version = "0.2.0"
	for name, files := range skills {
		e := skill.IndexEntry{Name: name, Description: "served by the test"}
		for p, c := range files {
			d := skill.FileDigest([]byte(c))
			if p == "SKILL.md" && strings.Contains(strings.Join(wrong, " "), name) {
				d = skill.FileDigest([]byte(c + "changed"))
			}
			e.Files = append(e.Files, skill.File{Path: p, Digest: d})
		}
		e.Digest = skill.Digest(e.Files)
		ix.Skills = append(ix.Skills, e)
	}
	b, _ := json.Marshal(ix)
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/agent-skills/index.json", func(w http.ResponseWriter, _ *http.Request) { w.Write(b) })
	mux.HandleFunc("/.well-known/agent-skills/", func(w http.ResponseWriter, r *http.Request) {
		name, p, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/.well-known/agent-skills/"), "/")
		c, ok := skills[name][p]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, c)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func skillMD(name, description, body string) string {
	return "---\nname: " + name + "\ndescription: " + description + "\n---\n" + body + "\n"
}

// Skills on a team server (issue 26): keel --server URL skills
// install|list|show go through the API as the local forms go through
// the service; an admin installs from a discovery index into the
// server's store and pins the skill in a project on the server; a wrong
// digest stores nothing; a token bound to an agent sees what runs of its
// agent would be offered and cannot install; and a run created through
// the API is offered the server's skills exactly as keel run's are and
// loads one with use_skill (no_skills offers none).
func TestSkillsServer(t *testing.T) {
	db := setup(t)
	ctx := t.Context()
	home := os.Getenv("KEEL_HOME")
	ws := t.TempDir()
	user := filepath.Join(home, "skills", "house-style")
	os.MkdirAll(user, 0o755)
	if err := os.WriteFile(filepath.Join(user, "SKILL.md"), []byte(skillMD("house-style", "Commit messages the way this team writes them.", "Subjects under 72 characters, imperative mood.")), 0o644); err != nil {
		t.Fatal(err)
	}
	pub := skillPublisher(t, map[string]map[string]string{
		"lint-py":    {"SKILL.md": skillMD("lint-py", "Lint Python files before a commit.", "Run `sh $SKILL_DIR/scripts/lint.sh FILE...`."), "scripts/lint.sh": "#!/bin/sh\npython3 -m pyflakes \"$@\"\n"},
		"bad-digest": {"SKILL.md": skillMD("bad-digest", "A skill the index lies about.", "Nothing.")},
	}, "bad-digest")
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := keel(t, args...)
		if code != want {
			t.Fatalf("keel %s = %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out + errOut
	}
	run(0, "agents", "create", "bot")
	traj := writeTrajectory(t, "lint the code", []fcall{{"use_skill", map[string]any{"name": "lint-py"}}}, nil)
	srv := startServe(t, "--replay-dir", filepath.Dir(traj))
	admin := []string{"--server", srv.url, "--token", srv.savedToken(t)}

	out := run(0, append(admin, "skills", "install", pub.URL, "lint-py", "--workspace", ws)...)
	if !strings.Contains(out, "installed lint-py sha256:") || !strings.Contains(out, filepath.Join(ws, skill.LockFile)) {
		t.Errorf("skills install --server:\n%s", out)
	}
	if out := run(2, append(admin, "skills", "install", pub.URL, "bad-digest", "--workspace", ws)...); !strings.Contains(out, "refused") || !strings.Contains(out, "nothing was installed") {
		t.Errorf("a wrong digest through the server:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(home, "skill-store", "bad-digest")); !os.IsNotExist(err) {
		t.Errorf("the refused skill was stored: %v", err)
	}
	if out := run(2, append(admin, "skills", "install", pub.URL, "lint-py")...); !strings.Contains(out, "--workspace") {
		t.Errorf("install --server without --workspace:\n%s", out)
	}

	local := run(0, "skills", "list", "--workspace", ws)
	if !strings.Contains(local, "lint-py") || !strings.Contains(local, "house-style") {
		t.Fatalf("skills list:\n%s", local)
	}
	if remote := run(0, append(admin, "skills", "list", "--workspace", ws)...); remote != local {
		t.Errorf("skills list: local\n%s\nserver\n%s", local, remote)
	}
	if remote := run(0, append(admin, "skills", "list")...); strings.Contains(remote, "lint-py") || !strings.Contains(remote, "house-style") {
		t.Errorf("skills list --server without a workspace (the server's own skills):\n%s", remote)
	}
	localShow := run(0, "skills", "show", "lint-py", "--workspace", ws)
	if !strings.Contains(localShow, "source:      index ("+pub.URL) || !strings.Contains(localShow, "scripts/lint.sh") || !strings.Contains(localShow, "| Run `sh $SKILL_DIR/scripts/lint.sh FILE...`.") {
		t.Errorf("skills show:\n%s", localShow)
	}
	if remote := run(0, append(admin, "skills", "show", "lint-py", "--workspace", ws)...); remote != localShow {
		t.Errorf("skills show: local\n%s\nserver\n%s", localShow, remote)
	}

	_, tok, _ := keel(t, "--server", srv.url, "tokens", "create", "--name", "wendy", "--scope", "runs:write", "--agent", "bot")
	tok = strings.TrimSpace(tok)
	wendy := []string{"--server", srv.url, "--token", tok}
	if out := run(0, append(wendy, "skills", "list", "--workspace", ws)...); out != local {
		t.Errorf("skills list with bot's token:\n%s", out)
	}
	if out := run(1, append(wendy, "skills", "install", pub.URL, "lint-py", "--workspace", ws)...); !strings.Contains(out, "admin") {
		t.Errorf("skills install with a token that is not an admin's:\n%s", out)
	}
	if out := run(2, append(wendy, "skills", "list", "--workspace", "/")...); !strings.Contains(out, "workspace roots") {
		t.Errorf("skills list of a directory outside the roots:\n%s", out)
	}

	// A run created through the API is offered both, with use_skill.
	c := srv.clientWith(t, tok)
	r, err := c.CreateRun(ctx, &api.CreateRun{Model: "replay:" + filepath.Base(traj), Workspace: ws, Agent: "bot"})
	if err != nil {
		t.Fatal(err)
	}
	untilStopped(t, c, r.ID, 1)
	id, st := lastRun(t, db)
	if id != r.ID {
		t.Fatalf("newest run %s, want %s", id, r.ID)
	}
	k := st.Created.Skills
	if k == nil || len(k.Entries) != 2 || k.Tokens == 0 {
		t.Fatalf("the server's run was offered %+v", k)
	}
	for _, e := range k.Entries {
		if e.Name == "lint-py" && (e.Source != skill.SourceIndex || e.Scripts) {
			t.Errorf("lint-py offered as %+v (an index skill's scripts need --allow-scripts)", e)
		}
	}
	if !hasToolInfo(st.Created.Tools, skill.UseTool) {
		t.Errorf("the run's tools lack use_skill: %+v", st.Created.Tools)
	}
	if res := st.Turns[0].Calls[0].Finished; res == nil || res.IsError || !strings.Contains(res.Content, "Run `sh $SKILL_DIR/scripts/lint.sh") ||
		!strings.Contains(res.Content, "not given to this run") {
		t.Errorf("use_skill in the server's run: %+v", res)
	}
	t.Logf("a server run's skills section: %d tokens for %d skills", k.Tokens, len(k.Entries))

	r, err = c.CreateRun(ctx, &api.CreateRun{Model: "replay:" + filepath.Base(traj), Workspace: ws, Agent: "bot", NoSkills: true})
	if err != nil {
		t.Fatal(err)
	}
	untilStopped(t, c, r.ID, 1)
	if _, st := lastRun(t, db); st.Created.Skills != nil || hasToolInfo(st.Created.Tools, skill.UseTool) {
		t.Errorf("no_skills: offered %+v", st.Created.Skills)
	}
}

func hasToolInfo(tools []agent.ToolInfo, name string) bool {
	return slices.ContainsFunc(tools, func(t agent.ToolInfo) bool { return t.Name == name })
}

// An agent-written skill through a team server: a run created through
// the API with propose_skills proposes a candidate, tested in the
// server's sandbox; the candidate shows with --server; once evaluated
// on the server's machine, a promote_skill run waits for a person, who
// approves through the server; the server signs it with the agent's
// key and pins it, and the next API run is offered it, verified.
func TestSkillPromotionServer(t *testing.T) {
	db := setup(t)
	ctx := t.Context()
	ws := pyProject(t)
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := keel(t, args...)
		if code != want {
			t.Fatalf("keel %s = %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out + errOut
	}
	run(0, "auth", "key", "generate")
	run(0, "agents", "create", "bot")
	good := map[string]any{"name": "src-layout-tests", "description": "Run the tests of a Python project in the src layout without installing it (no network needed).",
		"instructions": "Do not pip install the project: run `sh $SKILL_DIR/scripts/run-tests.sh [pytest args]` from the workspace.",
		"files":        map[string]string{"scripts/run-tests.sh": runTestsScript},
		"tests":        []map[string]string{{"name": "calc", "command": "sh $SKILL_DIR/scripts/run-tests.sh tests"}},
		"covers":       "pytest|pip install", "usage": []string{"sh $SKILL_DIR/scripts/run-tests.sh tests"}}
	propose := writeTrajectory(t, "run the tests and keep what works as a skill", []fcall{{"propose_skill", good}}, nil)
	promote := writeTrajectory(t, "promote the skill", []fcall{{"promote_skill", map[string]any{"name": "src-layout-tests"}}}, nil)
	use := writeTrajectory(t, "run the tests", []fcall{{"use_skill", map[string]any{"name": "src-layout-tests"}}}, nil)
	var dirs []string
	for _, p := range []string{propose, promote, use} {
		dirs = append(dirs, "--replay-dir", filepath.Dir(p))
	}
	srv := startServe(t, dirs...)
	_, tok, _ := keel(t, "--server", srv.url, "tokens", "create", "--name", "wendy", "--scope", "runs:write,approvals:write", "--agent", "bot")
	tok = strings.TrimSpace(tok)
	c := srv.clientWith(t, tok)
	// create makes a run through the API and returns it once it stopped,
	// with the sequence number of the event that stopped it.
	var stopped int64
	create := func(traj string, proposeSkills bool) (string, *agent.State) {
		t.Helper()
		r, err := c.CreateRun(ctx, &api.CreateRun{Model: "replay:" + traj, Workspace: ws, Agent: "bot", ProposeSkills: proposeSkills})
		if err != nil {
			t.Fatal(err)
		}
		stopped = untilStopped(t, c, r.ID, 1).Seq
		id, st := lastRun(t, db)
		if id != r.ID {
			t.Fatalf("newest run %s, want %s", id, r.ID)
		}
		return id, st
	}

	_, st := create(propose, true)
	if res := st.Turns[0].Calls[0].Finished; res == nil || res.IsError || !hasToolInfo(st.Created.Tools, "promote_skill") {
		t.Fatalf("propose_skill on the server: %+v", res)
	}
	if out := run(0, "--server", srv.url, "--token", tok, "skills", "candidates"); !strings.Contains(out, "src-layout-tests@") || !strings.Contains(out, " tested ") {
		t.Fatalf("candidates through the server:\n%s", out)
	}
	recorded := writeTrajectory(t, "run the tests",
		[]fcall{sh("pip install -e .")}, []fcall{sh("python3 -m pytest tests 2>&1 | tail -5")}, []fcall{sh("pip install pytest")}, nil)
	if out := run(0, "skills", "evaluate", "src-layout-tests", "--recording", recorded, "--repo", ws, "--mount-path", "/workspace"); !strings.Contains(out, ": evaluated") {
		t.Fatalf("evaluate:\n%s", out)
	}

	id, st := create(promote, true)
	call := st.Turns[0].Calls[0].ID
	if st.Status != "paused" {
		t.Fatalf("the promote_skill run is %s, want paused for approval", st.Status)
	}
	run(0, "--server", srv.url, "--token", tok, "approve", id, call, "--no-wait")
	untilStopped(t, c, id, stopped+1)
	_, st = lastRun(t, db)
	if res := st.Turns[0].Calls[0].Finished; res == nil || res.IsError || !strings.Contains(res.Content, "approved by wendy, signed") {
		t.Fatalf("promote_skill through the server: %+v", res)
	}
	lock, _, err := skill.ReadLock(ws)
	if err != nil || len(lock.Skills) != 1 || lock.Skills[0].Signature == nil || lock.Skills[0].Signature.Agent != "bot" {
		t.Fatalf("lockfile: %+v, %v", lock, err)
	}

	_, st = create(use, false)
	if k := st.Created.Skills; k == nil || len(k.Entries) != 1 || !k.Entries[0].Signed || !k.Entries[0].Scripts {
		t.Fatalf("offered after the promotion: %+v", st.Created.Skills)
	}
	if res := st.Turns[0].Calls[0].Finished; res == nil || res.IsError || !strings.Contains(res.Content, "signature verified") {
		t.Errorf("use_skill on the server = %+v", res)
	}
}
