package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/skill"
)

// testSkills is a service.SkillHost over a test's directories, whose
// lockfiles are all trusted.
type testSkills struct{ user, store string }

func (h testSkills) Library(ws string) *skill.Library {
	return &skill.Library{UserDir: h.user, StoreDir: h.store, Workspace: ws, LockTrusted: func([]byte) bool { return true }}
}

func (h testSkills) StoreDir() string { return h.store }

func (h testSkills) Pin(ws string, p skill.Pinned) error {
	lock, _, err := skill.ReadLock(ws)
	if err != nil {
		return err
	}
	_, err = lock.Pin(ws, p)
	return err
}

// Skills on a team server are per tenant: an admin sees every skill a
// run in a workspace would be offered and installs from a discovery
// index (a wrong digest stores nothing); a token sees the skills the
// server's policy lets one of its agents load, and cannot install; the
// web UI's skills pages show the same and install for admins.
func TestSkillsTenants(t *testing.T) {
	user, store := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(user, "house-style"), 0o755)
	if err := os.WriteFile(filepath.Join(user, "house-style", "SKILL.md"), []byte("---\nname: house-style\ndescription: Commit messages as this team writes them.\n---\nSubjects under 72 characters.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rule := `@id("no-index-skills-for-beta") forbid (principal == Keel::Agent::"beta", action == Keel::Action::"skill_load", resource is Keel::Skill) when { resource.source == "index" };`
	src := strings.Replace(string(policy.DefaultSource()), "cedar = '''\n", "cedar = '''\n"+rule+"\n", 1)
	eng, err := policy.Parse("skills.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, &envOptions{opts: func(o *service.Options) { o.Skills, o.Policy = testSkills{user, store}, eng }})
	ctx := t.Context()
	ws := t.TempDir()
	files := map[string]string{"SKILL.md": "---\nname: lint-py\ndescription: Lint Python files.\n---\nRun pyflakes on the changed files.\n"}
	ix := skill.IndexEntry{Name: "lint-py", Description: "Lint Python files."}
	for p, c := range files {
		ix.Files = append(ix.Files, skill.File{Path: p, Digest: skill.FileDigest([]byte(c))})
	}
	ix.Digest = skill.Digest(ix.Files)
	bad := ix
	bad.Name = "liar"
	bad.Files = []skill.File{{Path: "SKILL.md", Digest: skill.FileDigest([]byte("other"))}}
	bad.Digest = skill.Digest(bad.Files)
	b, _ := json.Marshal(skill.Index{Version: "0.2.0", Skills: []skill.IndexEntry{ix, bad}})
	pub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == skill.IndexPath:
			w.Write(b)
		case strings.HasSuffix(p, "/SKILL.md"):
			fmt.Fprint(w, files["SKILL.md"])
		default:
			http.NotFound(w, r)
		}
	}))
	defer pub.Close()

	for _, a := range []string{"alpha", "beta"} {
		if _, err := e.admin.CreateAgent(ctx, &api.CreateAgent{Name: a}); err != nil {
			t.Fatal(err)
		}
	}
	alpha := e.client(e.newToken("al", []string{"alpha"}, api.ScopeRunsRead, api.ScopeRunsWrite))
	beta := e.client(e.newToken("bea", []string{"beta"}, api.ScopeRunsRead))
	if _, err := alpha.InstallSkill(ctx, &api.InstallSkill{URL: pub.URL, Name: "lint-py", Workspace: ws}); !isCode(err, api.CodeForbidden) {
		t.Errorf("install with a token that is not an admin's: %v", err)
	}
	if _, err := e.admin.InstallSkill(ctx, &api.InstallSkill{URL: pub.URL, Name: "liar", Workspace: ws}); !isCode(err, api.CodeInvalidRequest) || !strings.Contains(err.Error(), "nothing was installed") {
		t.Errorf("install of a skill with a wrong digest: %v", err)
	}
	if _, err := os.Stat(filepath.Join(store, "liar")); !os.IsNotExist(err) {
		t.Errorf("the refused skill was stored: %v", err)
	}
	sk, err := e.admin.InstallSkill(ctx, &api.InstallSkill{URL: pub.URL, Name: "lint-py", Workspace: ws})
	if err != nil || sk.Digest != ix.Digest || sk.Source != skill.SourceIndex || sk.Lockfile != filepath.Join(ws, skill.LockFile) {
		t.Fatalf("install = %+v, %v", sk, err)
	}

	names := func(c *client.Client, ws string) []string {
		t.Helper()
		l, err := c.Skills(ctx, ws)
		if err != nil {
			t.Fatalf("skills of %s: %v", ws, err)
		}
		var out []string
		for _, s := range l.Skills {
			out = append(out, s.Name)
		}
		return out
	}
	for _, c := range []struct {
		name string
		c    *client.Client
		ws   string
		want string
	}{
		{"admin", e.admin, ws, "house-style lint-py"},
		{"admin, no workspace", e.admin, "", "house-style"},
		{"alpha", alpha, ws, "house-style lint-py"},
		{"beta (policy forbids index skills)", beta, ws, "house-style"},
	} {
		if got := strings.Join(names(c.c, c.ws), " "); got != c.want {
			t.Errorf("%s sees %q, want %q", c.name, got, c.want)
		}
	}
	if d, err := alpha.Skill(ctx, ws, "lint-py"); err != nil || strings.TrimSpace(d.Instructions) != "Run pyflakes on the changed files." || len(d.FileList) != 1 || d.FileList[0].Digest != ix.Files[0].Digest {
		t.Errorf("skill as alpha = %+v, %v", d, err)
	}
	if _, err := beta.Skill(ctx, ws, "lint-py"); !isCode(err, api.CodeNotFound) {
		t.Errorf("skill lint-py as beta: %v", err)
	}
	if _, err := alpha.Skills(ctx, "/"); !isCode(err, api.CodeInvalidRequest) {
		t.Errorf("skills of / as a token: %v", err)
	}

	// The web UI.
	sec := e.newToken("bob", []string{"alpha"}, api.ScopeRunsRead)
	code, body := e.uiGet("/ui/skills?workspace="+url.QueryEscape(ws), sec)
	if code != http.StatusOK || !strings.Contains(body, `data-name="lint-py"`) || !strings.Contains(body, `data-name="house-style"`) || strings.Contains(body, `name="allow_scripts"`) {
		t.Errorf("/ui/skills = %d\n%s", code, body)
	}
	code, body = e.uiGet("/ui/skills/lint-py?workspace="+url.QueryEscape(ws), sec)
	if code != http.StatusOK || !strings.Contains(body, "Run pyflakes on the changed files.") || !strings.Contains(body, ix.Digest) {
		t.Errorf("/ui/skills/lint-py = %d\n%s", code, body)
	}
	bsec := e.newToken("bea2", []string{"beta"}, api.ScopeRunsRead)
	if code, _ := e.uiGet("/ui/skills/lint-py?workspace="+url.QueryEscape(ws), bsec); code != http.StatusNotFound {
		t.Errorf("beta's page of lint-py = %d", code)
	}
	if code, _ := e.uiDo(http.MethodPost, "/ui/skills", sec, url.Values{"url": {pub.URL}, "name": {"lint-py"}, "workspace": {ws}}, "same-origin"); code != http.StatusForbidden {
		t.Errorf("install form without admin = %d", code)
	}
	code, _, resp := e.uiResp(http.MethodPost, "/ui/skills", e.secret, url.Values{"url": {pub.URL}, "name": {"lint-py"}, "workspace": {ws}, "allow_scripts": {"on"}}, "same-origin")
	if code != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/skills/lint-py?workspace=") {
		t.Errorf("install form = %d %s", code, resp.Header.Get("Location"))
	}
	if lock, _, err := skill.ReadLock(ws); err != nil || len(lock.Skills) != 1 || !lock.Skills[0].Scripts {
		t.Errorf("lockfile after the form's install: %+v %v", lock, err)
	}
}
