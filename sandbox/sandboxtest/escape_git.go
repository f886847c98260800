package sandboxtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/sandbox"
)

// The "host git" cases try to make the host's git run a program the next
// time a person uses it in the workspace, through every file git reads
// as configuration or follows to another configuration: a commondir
// redirect, a rewritten .git file, config.worktree, a nested repository
// registered as a submodule (git status recurses into it), submodule and
// worktree git directories, a fresh repository with a hook, the workspace
// root made to look like a bare repository, an include in a nested
// repository's config, and a git directory hidden where a walk might
// not look. Each payload touches a marker file in a host directory; the
// check runs the host's git the way a person would (when git is
// installed on the host) and fails if the marker appears.

// fsmonitorConfig is a git config whose core.fsmonitor runs a command
// that creates marker (a host path).
func fsmonitorConfig(marker string) string {
	return `[core]\n\tfsmonitor = "touch ` + marker + `; false"\n`
}

// baseGitConfig is the config of the repositories the cases prepare.
const baseGitConfig = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"

// makeGitDir writes a minimal, valid git directory at dir on the host by
// hand (host git is not needed): HEAD, objects/, refs/heads/, config and
// a sample hook.
func makeGitDir(t *testing.T, dir, config string) {
	t.Helper()
	for _, d := range []string{"objects", "refs/heads", "hooks"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{
		"HEAD":                     "ref: refs/heads/main\n",
		"config":                   config,
		"hooks/pre-commit.sample":  "#!/bin/sh\n",
		"description":              "test\n",
		"hooks/post-update.sample": "#!/bin/sh\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// prepareRepo makes the workspace a git repository with config.
func prepareRepo(config string) func(t *testing.T, e *escapeEnv) {
	return func(t *testing.T, e *escapeEnv) {
		makeGitDir(t, filepath.Join(e.ws, ".git"), config)
	}
}

// hostGitClean runs the host's git in dir (host path) with args, as a
// person would, with an empty global configuration, and fails the test
// if marker (a host path) appeared. Without git on the host it only
// checks the marker.
func hostGitClean(t *testing.T, dir, marker string, args ...string) {
	t.Helper()
	if git, err := exec.LookPath("git"); err == nil {
		cmd := exec.Command(git, args...)
		cmd.Dir = dir
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1",
			"GIT_CEILING_DIRECTORIES=" + filepath.Dir(dir), "LC_ALL=C"}
		out, _ := cmd.CombinedOutput()
		t.Logf("host: git %s in %s:\n%s", strings.Join(args, " "), dir, out)
	} else {
		t.Logf("git is not installed on the host: checking the files only")
	}
	if _, err := os.Lstat(marker); err == nil {
		t.Errorf("ESCAPE: the host's git ran a program the sandbox planted (%s exists)", marker)
	}
}

// hostFileLacks fails if the host file rel (in the workspace) contains
// any of words.
func hostFileLacks(t *testing.T, e *escapeEnv, rel string, words ...string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.ws, rel))
	if err != nil {
		return
	}
	for _, w := range words {
		if bytes.Contains(b, []byte(w)) {
			t.Errorf("ESCAPE: host %s contains %q:\n%s", rel, w, b)
		}
	}
}

// marker is the host path a case's payload touches.
func marker(e *escapeEnv, name string) string { return filepath.Join(e.outside, "pwned-"+name) }

// gitCases are the "host git" escape cases.
func gitCases() []escapeCase {
	refused := []string{kindReadOnly, kindDenied, kindQuarantined}
	return []escapeCase{
		{name: "git_commondir_redirect", area: "host git", want: refused, prepare: prepareRepo(baseGitConfig),
			script: `mkdir -p .cache && cp -r .git .cache/g && printf '` + fsmonitorConfig("$OUTSIDE/pwned-commondir") + `' > .cache/g/config
echo ../.cache/g > .git/commondir; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
				hostLacks(func(e *escapeEnv) string { return filepath.Join(e.ws, ".git/commondir") })(t, e, nil, "")
				hostGitClean(t, e.ws, marker(e, "commondir"), "status")
			}},
		{name: "git_gitfile_rewrite", area: "host git", want: refused,
			prepare: func(t *testing.T, e *escapeEnv) {
				gd := filepath.Join(e.outside, "gitfile-"+filepath.Base(e.ws))
				makeGitDir(t, gd, baseGitConfig)
				writeHost(".git", "gitdir: "+gd+"\n")(t, e)
			},
			script: `printf 'gitdir: ./evil/g\n' > .git; mkdir -p evil/g/objects evil/g/refs/heads && echo 'ref: refs/heads/main' > evil/g/HEAD
printf '` + fsmonitorConfig("$OUTSIDE/pwned-gitfile") + `' > evil/g/config; rm -f .git; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
				b, err := os.ReadFile(filepath.Join(e.ws, ".git"))
				if err != nil || !strings.HasPrefix(string(b), "gitdir: "+e.outside) {
					t.Errorf("ESCAPE: host .git is now %q (%v)", b, err)
				}
				hostGitClean(t, e.ws, marker(e, "gitfile"), "status")
			}},
		{name: "git_config_worktree", area: "host git", want: refused,
			prepare: prepareRepo("[core]\n\trepositoryformatversion = 1\n\tbare = false\n[extensions]\n\tworktreeConfig = true\n"),
			script:  `printf '` + fsmonitorConfig("$OUTSIDE/pwned-cfgwt") + `' > .git/config.worktree; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
				hostFileLacks(t, e, ".git/config.worktree", "fsmonitor")
				hostGitClean(t, e.ws, marker(e, "cfgwt"), "status")
			}},
		{name: "git_config_worktree_existing", area: "host git", want: []string{kindReadOnly, kindDenied, kindBusy},
			prepare: func(t *testing.T, e *escapeEnv) {
				prepareRepo("[core]\n\trepositoryformatversion = 1\n\tbare = false\n[extensions]\n\tworktreeConfig = true\n")(t, e)
				writeHost(".git/config.worktree", "[core]\n\tbare = false\n")(t, e)
			},
			script: `printf '` + fsmonitorConfig("$OUTSIDE/pwned-cfgwt2") + `' >> .git/config.worktree; mv .git/config.worktree .git/x; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, r *sandbox.Result, out string) {
				hostHas(".git/config.worktree", "[core]\n\tbare = false\n")(t, e, r, out)
				hostGitClean(t, e.ws, marker(e, "cfgwt2"), "status")
			}},
		{name: "git_submodule_gitlink", area: "host git", needs: []string{"git"}, want: refused, prepare: prepareRepo(baseGitConfig),
			script: `git init -q sub && git -C sub -c user.name=k -c user.email=k@k.invalid commit -q --allow-empty -m s &&
git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub &&
git -C sub config core.fsmonitor "touch $OUTSIDE/pwned-gitlink; false"; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
				hostFileLacks(t, e, "sub/.git/config", "fsmonitor")
				hostGitClean(t, e.ws, marker(e, "gitlink"), "status")
			}},
		{name: "git_submodule_in_unreadable_dir", area: "host git", needs: []string{"git"}, want: refused, prepare: prepareRepo(baseGitConfig),
			// The report's attack on a guard that cannot read a directory
			// (Keel running as an ordinary user): git enters d/pl with
			// search permission on d alone.
			script: `mkdir d && git init -q d/pl && git -C d/pl -c user.name=k -c user.email=k@k.invalid commit -q --allow-empty -m s &&
git update-index --add --cacheinfo 160000,$(git -C d/pl rev-parse HEAD),d/pl &&
printf '` + fsmonitorConfig("$OUTSIDE/pwned-unreadable") + `' >> d/pl/.git/config && chmod 111 d; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
				os.Chmod(filepath.Join(e.ws, "d"), 0o755) // let the host's check read it (and the cleanup remove it)
				hostFileLacks(t, e, "d/pl/.git/config", "fsmonitor")
				hostGitClean(t, e.ws, marker(e, "unreadable"), "status")
			}},
		{name: "git_gitfile_padded", area: "host git", needs: []string{"git"}, want: refused, prepare: prepareRepo(baseGitConfig),
			// git follows a "gitdir:" line followed by any number of
			// newlines; a guard that reads only small .git files would not.
			script: `e=.git/objects/zy/e; mkdir -p $e/objects $e/refs/heads sub5 && echo 'ref: refs/heads/main' > $e/HEAD &&
printf '` + fsmonitorConfig("$OUTSIDE/pwned-padded") + `' > $e/config && { echo 'gitdir: ../.git/objects/zy/e'; head -c 8192 /dev/zero | tr '\0' '\n'; } > sub5/.git &&
git update-index --add --cacheinfo 160000,0123456789012345678901234567890123456789,sub5; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
				hostGitClean(t, e.ws, marker(e, "padded"), "status")
			}},
		{name: "git_gitfile_into_objects", area: "host git", needs: []string{"git"}, want: refused, prepare: prepareRepo(baseGitConfig),
			script: `e=.git/objects/zz/e; mkdir -p $e/objects $e/refs/heads sub4 && echo 'ref: refs/heads/main' > $e/HEAD &&
printf '` + fsmonitorConfig("$OUTSIDE/pwned-objects") + `' > $e/config && echo 'gitdir: ../.git/objects/zz/e' > sub4/.git &&
git update-index --add --cacheinfo 160000,0123456789012345678901234567890123456789,sub4; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
				hostFileLacks(t, e, ".git/objects/zz/e/config", "fsmonitor")
				hostGitClean(t, e.ws, marker(e, "objects"), "status")
			}},
		{name: "git_module_gitdirs", area: "host git", want: refused,
			prepare: func(t *testing.T, e *escapeEnv) {
				prepareRepo(baseGitConfig)(t, e)
				makeGitDir(t, filepath.Join(e.ws, ".git/modules/m"), baseGitConfig+"\tworktree = ../../../m\n")
				writeHost("m/.git", "gitdir: ../.git/modules/m\n")(t, e)
			},
			script: `printf '` + fsmonitorConfig("$OUTSIDE/pwned-module") + `' >> .git/modules/m/config; echo 'touch $OUTSIDE/pwned-module' > .git/modules/m/hooks/post-checkout
n=.git/modules/n; mkdir -p $n/objects $n/refs/heads $n/hooks && echo 'ref: refs/heads/main' > $n/HEAD && printf '` + fsmonitorConfig("$OUTSIDE/pwned-module") + `' > $n/config
printf '#!/bin/sh\ntouch $OUTSIDE/pwned-module\n' > $n/hooks/post-checkout; chmod +x $n/hooks/post-checkout; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, r *sandbox.Result, out string) {
				hostHas(".git/modules/m/config", baseGitConfig+"\tworktree = ../../../m\n")(t, e, r, out)
				hostLacks(func(e *escapeEnv) string { return filepath.Join(e.ws, ".git/modules/m/hooks/post-checkout") })(t, e, r, out)
				hostLacks(func(e *escapeEnv) string { return filepath.Join(e.ws, ".git/modules/n/hooks/post-checkout") })(t, e, r, out)
				hostFileLacks(t, e, ".git/modules/n/config", "fsmonitor")
				hostGitClean(t, filepath.Join(e.ws, "m"), marker(e, "module"), "status")
			}},
		{name: "git_worktree_admin", area: "host git", want: refused,
			prepare: func(t *testing.T, e *escapeEnv) {
				prepareRepo(baseGitConfig)(t, e)
				wt := filepath.Join(e.outside, "wt-"+filepath.Base(e.ws))
				writeHost(".git/worktrees/w/HEAD", "ref: refs/heads/main\n")(t, e)
				writeHost(".git/worktrees/w/commondir", "../..\n")(t, e)
				writeHost(".git/worktrees/w/gitdir", wt+"/.git\n")(t, e)
				if err := os.MkdirAll(wt, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: "+filepath.Join(e.ws, ".git/worktrees/w")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			script: `mkdir -p .cache/g/objects .cache/g/refs/heads && printf '` + fsmonitorConfig("$OUTSIDE/pwned-worktree") + `' > .cache/g/config
echo ../../../.cache/g > .git/worktrees/w/commondir
v=.git/worktrees/v; mkdir -p $v && echo 'ref: refs/heads/main' > $v/HEAD && echo ../../../.cache/g > $v/commondir; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, r *sandbox.Result, out string) {
				hostHas(".git/worktrees/w/commondir", "../..\n")(t, e, r, out)
				hostLacks(func(e *escapeEnv) string { return filepath.Join(e.ws, ".git/worktrees/v/commondir") })(t, e, r, out)
				hostGitClean(t, filepath.Join(e.outside, "wt-"+filepath.Base(e.ws)), marker(e, "worktree"), "status")
			}},
		{name: "git_new_repository_hook", area: "host git", want: refused,
			script: `mkdir -p .git/hooks && printf '#!/bin/sh\ntouch $OUTSIDE/pwned-newrepo\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit
printf '` + fsmonitorConfig("$OUTSIDE/pwned-newrepo") + `' > .git/config; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, r *sandbox.Result, out string) {
				hostLacks(func(e *escapeEnv) string { return filepath.Join(e.ws, ".git/hooks/pre-commit") })(t, e, r, out)
				hostFileLacks(t, e, ".git/config", "fsmonitor")
			}},
		{name: "git_bare_workspace_root", area: "host git", want: refused,
			script: `mkdir -p objects refs/heads && echo 'ref: refs/heads/main' > HEAD
printf '[alias]\n\tkeelprobe = "!touch $OUTSIDE/pwned-bare"\n' > config; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
				hostFileLacks(t, e, "config", "keelprobe")
				hostGitClean(t, e.ws, marker(e, "bare"), "keelprobe")
			}},
		{name: "git_include_in_nested_repo", area: "host git", needs: []string{"git"}, want: refused,
			script: `git init -q sub2 && printf '[include]\n\tpath = ../../evil.cfg\n' >> sub2/.git/config &&
printf '[alias]\n\tkeelprobe = "!touch $OUTSIDE/pwned-include"\n' > evil.cfg; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
				hostFileLacks(t, e, "sub2/.git/config", "include")
				hostGitClean(t, filepath.Join(e.ws, "sub2"), marker(e, "include"), "keelprobe")
			}},
		{name: "git_include_of_workspace_file", area: "host git", want: []string{kindReadOnly, kindDenied, kindQuarantined},
			prepare: func(t *testing.T, e *escapeEnv) {
				prepareRepo(baseGitConfig+"[include]\n\tpath = ../.gitconfig.shared\n\tpath = ../tools/missing.cfg\n")(t, e)
				writeHost(".gitconfig.shared", "[user]\n\tname = k\n")(t, e)
			},
			script: `printf '` + fsmonitorConfig("$OUTSIDE/pwned-incl") + `' >> .gitconfig.shared
mkdir -p tools && printf '` + fsmonitorConfig("$OUTSIDE/pwned-incl") + `' > tools/missing.cfg; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, r *sandbox.Result, out string) {
				hostHas(".gitconfig.shared", "[user]\n\tname = k\n")(t, e, r, out)
				hostFileLacks(t, e, "tools/missing.cfg", "fsmonitor")
				hostGitClean(t, e.ws, marker(e, "incl"), "status")
			}},
		{name: "shared_workspace_placeholders", area: "host git", want: refused, sibling: true,
			script: `mkdir -p .git/hooks; printf '#!/bin/sh\ntouch $OUTSIDE/pwned-shared\n' > .git/hooks/pre-commit
printf '` + fsmonitorConfig("$OUTSIDE/pwned-shared") + `' > .git/config; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, r *sandbox.Result, out string) {
				hostLacks(func(e *escapeEnv) string { return filepath.Join(e.ws, ".git/hooks/pre-commit") })(t, e, r, out)
				hostFileLacks(t, e, ".git/config", "fsmonitor")
			}},
		{name: "shared_workspace_existing_repo", area: "host git", want: refused, sibling: true, prepare: prepareRepo(baseGitConfig),
			script: `printf '#!/bin/sh\ntouch $OUTSIDE/pwned-shared2\n' > .git/hooks/pre-commit; printf '` + fsmonitorConfig("$OUTSIDE/pwned-shared2") + `' >> .git/config; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, r *sandbox.Result, out string) {
				hostLacks(func(e *escapeEnv) string { return filepath.Join(e.ws, ".git/hooks/pre-commit") })(t, e, r, out)
				hostHas(".git/config", baseGitConfig)(t, e, r, out)
				hostGitClean(t, e.ws, marker(e, "shared2"), "status")
			}},
		{name: "policy_path_created", area: "protected paths", want: []string{kindReadOnly, kindDenied, kindQuarantined},
			edit:   func(s *sandbox.Spec, _ *escapeEnv) { s.Protected = []string{"deploy/new.env"} },
			script: `mkdir -p deploy && echo TOKEN=planted > deploy/new.env; echo attempted`,
			check: func(t *testing.T, e *escapeEnv, _ *sandbox.Result, _ string) {
				hostFileLacks(t, e, "deploy/new.env", "planted")
			}},
	}
}
