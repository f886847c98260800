package policy_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/policy"
)

// A path of [paths] deny is denied on every route the gate can see,
// whatever the Cedar rules permit; a directory above it is not (the
// sandbox hides the path from it).
func TestDeniedPaths(t *testing.T) {
	t.Parallel()
	e := mustParse(t, "p.toml", `version = 1
cedar = '''
@id("all") permit (principal, action, resource);
'''
[paths]
deny = ["secrets", ".env", "/srv/keys/", "secrets"]

[[test]]
name = "cat"
command = "cat secrets/key.txt"
expect = "deny"

[[test]]
name = "a copy out"
command = "cp -r secrets /tmp/x"
expect = "deny"

[[test]]
name = "a write into it"
command = "echo x >> .env"
expect = "deny"

[[test]]
name = "through cd"
command = "cd secrets && cat key.txt"
expect = "deny"
parts = ["deny", "deny"]

[[test]]
name = "git's tree"
command = "git show HEAD:secrets/key.txt"
expect = "deny"

[[test]]
name = "git's tree at a computed revision"
command = "git show $(git rev-parse HEAD):secrets/key.txt"
expect = "deny"

[[test]]
name = "git's tree at a computed revision, ./ form, quoted"
command = "git cat-file -p \"$REV:./secrets\""
expect = "deny"

[[test]]
name = "git's tree, a name that only starts like it"
command = "git show $(git rev-parse HEAD):secrets2/x"
expect = "allow"

[[test]]
name = "git's tree, another file"
command = "git show HEAD:src/app.py && git log -p -- src"
expect = "allow"

[[test]]
name = "an absolute path"
command = "ls /srv/keys/a"
expect = "deny"

[[test]]
name = "a read_file"
tool = "read_file"
args = { path = "secrets/key.txt" }
expect = "deny"

[[test]]
name = "a search of the workspace is the sandbox's to bound"
command = "grep -rn token . && tar czf /tmp/all.tgz ."
expect = "allow"

[[test]]
name = "a name that only starts like it"
command = "cat secrets2/x .envrc"
expect = "allow"

[[test]]
name = "without a sandbox too"
command = "cat secrets/key.txt"
sandbox = "none"
expect = "deny"
`)
	for _, r := range e.Test(t.Context()) {
		if r.Problem != "" {
			t.Errorf("%s: %s %+v", r.Case.Name, r.Problem, r.Got.Parts)
		}
	}
	if got := e.DeniedPaths(); !slices.Equal(got, []string{"secrets", ".env", "/srv/keys"}) {
		t.Errorf("DeniedPaths = %q", got)
	}
	d := e.Decide(t.Context(), bashCall("cat secrets/key.txt"))
	if d.Policies[0] != policy.PolicyPaths || !strings.Contains(d.Reason, "forbids the path secrets") {
		t.Errorf("decision %+v", d)
	}
	for _, bad := range []string{"..", "/", "~/.ssh", "../x", ""} {
		if _, err := policy.Parse("p.toml", []byte("version = 1\ncedar = 'permit (principal, action, resource);'\n[paths]\ndeny = [\""+bad+"\"]\n")); err == nil {
			t.Errorf("deny %q parsed", bad)
		}
	}
}
