package policy

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/policy/bash"
)

// Flow is what the gate knows of the data a call may carry out and of
// the data the run has seen so far (docs/security.md, "Information
// flow"). The runtime fills it from the run's journal and the secrets it
// holds; policies see it in the context as carries_secret, secrets,
// untrusted_seen, private_touched, untrusted_source, private_source and
// unattended, and per part as data_out, autorun and hides_from_git.
type Flow struct {
	// Secrets are the secrets the call's arguments carry: by value, in a
	// common encoding, in part, or by naming the variable that holds one
	// in code or a command line.
	Secrets []SecretUse `json:"secrets,omitempty"`
	// Untrusted says what first brought untrusted input into the run (a
	// fetched page, an MCP or connector result...), with its event; ""
	// when nothing did.
	Untrusted string `json:"untrusted,omitempty"`
	// Private says what first brought private or secret data into the
	// run (a result read with a credential or from a connector, a secret
	// given to the sandbox), with its event; "" when nothing did.
	Private string `json:"private,omitempty"`
	// PrivateProviders are the credential providers whose data the run
	// read; PrivateOther is set when it touched private or secret data of
	// another kind (a connector, a secret in the sandbox). Data read only
	// with provider P's credential may flow back to P's own resources:
	// the policy sees private_own_provider on a call carrying P's
	// credential.
	PrivateProviders []string `json:"private_providers,omitempty"`
	PrivateOther     bool     `json:"private_other,omitempty"`
	// Unattended is set for runs nobody is there to approve (started by
	// a schedule or a trigger): the default policy denies what it would
	// ask.
	Unattended bool `json:"unattended,omitempty"`
	// Held names the secrets the sandbox holds (--secret-env): code the
	// sandbox runs can read them whatever the call's arguments say. The
	// policy sees holds_secret and held_secrets.
	Held []string `json:"held,omitempty"`
	// OutputOut is set when the run's output reaches people who may not
	// hold the secrets its sandbox holds: on a team server, a run holding
	// the operator's --secret-env secrets that a token without the admin
	// scope created (its events, the API and the web UI show it the
	// output). That output is a way out like an allowed host: the policy
	// sees output_out, and data_out and unseen_out count as if the run
	// could reach a host.
	OutputOut bool `json:"output_out,omitempty"`
}

// SecretUse is one secret a call carries.
type SecretUse struct {
	// Name names the secret (its variable, "vault token of PROVIDER"...).
	Name string `json:"name"`
	// Form is how it is spelled: "as is", "base64", "hex", "reversed",
	// "url-escaped", "base64 inside", "split", "by reference"...
	Form string `json:"form"`
	// Where is the argument it is in ("url", "body", "headers", "command").
	Where string `json:"where,omitempty"`
}

// String says the use for people: "API_TOKEN (base64, in body)".
func (s SecretUse) String() string {
	where := ""
	if s.Where != "" {
		where = ", in " + s.Where
	}
	return fmt.Sprintf("%s (%s%s)", s.Name, s.Form, where)
}

// Policy ids of the default policy's information-flow rules, whose
// asks and denials [Engine.Decide] explains with the flow.
var flowPolicies = []string{"secret-out", "secret-out-unattended", "secret-unseen-out", "secret-unseen-unattended",
	"secret-written", "secret-written-unattended", "secret-shown", "secret-shown-unattended", "trifecta", "trifecta-unattended", "autorun-after-untrusted", "autorun-unattended"}

// flowContext adds the call's flow to a part's context; provider is the
// credential provider the call carries ("" for none).
func flowContext(ctx cedar.RecordMap, fl *Flow, provider string) {
	if fl == nil {
		fl = &Flow{}
	}
	own := provider != "" && fl.Private != "" && !fl.PrivateOther && len(fl.PrivateProviders) > 0
	for _, p := range fl.PrivateProviders {
		own = own && p == provider
	}
	ctx["private_own_provider"] = cedar.Boolean(own)
	var names []string
	for _, s := range fl.Secrets {
		if !slices.Contains(names, s.Name) {
			names = append(names, s.Name)
		}
	}
	ctx["carries_secret"] = cedar.Boolean(len(fl.Secrets) > 0)
	ctx["secrets"] = strSet(names)
	ctx["untrusted_seen"] = cedar.Boolean(fl.Untrusted != "")
	ctx["private_touched"] = cedar.Boolean(fl.Private != "")
	ctx["untrusted_source"] = cedar.String(fl.Untrusted)
	ctx["private_source"] = cedar.String(fl.Private)
	ctx["unattended"] = cedar.Boolean(fl.Unattended)
	ctx["holds_secret"] = cedar.Boolean(len(fl.Held) > 0)
	ctx["held_secrets"] = strSet(fl.Held)
	ctx["output_out"] = cedar.Boolean(fl.OutputOut)
}

// flowDetail explains the flow of a call that a flow rule asked about or
// denied: which secrets it carries and how, what untrusted input and
// private data the run saw.
func flowDetail(fl *Flow) string {
	if fl == nil {
		return ""
	}
	var parts []string
	for _, s := range fl.Secrets {
		parts = append(parts, "carries secret "+s.String())
	}
	if fl.Untrusted != "" {
		parts = append(parts, "untrusted input: "+fl.Untrusted)
	}
	if fl.Private != "" {
		parts = append(parts, "private data: "+fl.Private)
	}
	if fl.OutputOut {
		parts = append(parts, "output: shown to the run's creator, a token without the admin scope, and the secrets are the server operator's")
	}
	return strings.Join(parts, "; ")
}

// dataOut reports whether a part can carry data out of the run: a
// request to any host (its URL, query, headers and body), a call of an
// MCP server's or connector's tool with arguments, a command that uses
// the network, or one whose code is unknown when the run may reach a
// host.
func dataOut(c *Call, f *facts, networkAllowed bool) bool {
	switch {
	case c.Tool == "fetch_url" || c.Tool == "http_request":
		return true
	case c.Tool == MemoryWriteTool:
		// Memory outlives the run: other runs, agents and people read it.
		return true
	case c.Server != "" && strings.HasSuffix(c.Tool, "__sql_query"):
		// Keel's own SQL connector tool: one statement in a read-only
		// transaction, sent only to the database the connector names,
		// which holds the data already.
		return false
	case c.Server != "":
		a := strings.TrimSpace(string(c.Arguments))
		return a != "" && a != "{}" && a != "null"
	case c.Tool == "bash":
		return f.Network || ((f.Dynamic || f.Code || f.Opaque != "") && networkAllowed)
	case c.Effect == "external" && networkAllowed:
		// python and other tools running code in the sandbox.
		return true
	}
	return false
}

// unseenOut reports whether a part that can carry data out (dataOut)
// sends what its arguments do not show, so that scanning them for a
// secret proves nothing: a command that runs code Keel cannot read or
// is only known at run time, one that sends a file or its input (curl
// -d @f, scp, git push), a tool that runs code (python); only when the
// run allows a host.
func unseenOut(c *Call, f *facts, networkAllowed bool) bool {
	if !networkAllowed || !dataOut(c, f, networkAllowed) {
		// Without an allowed host (or an output that reaches people
		// who may not hold the run's secrets) nothing goes anywhere.
		return false
	}
	switch {
	case c.Tool == "bash":
		return f.Dynamic || f.Code || f.Opaque != "" || f.Sends != ""
	case c.Tool == "fetch_url" || c.Tool == "http_request" || c.Tool == MemoryWriteTool || c.Server != "":
		return false // the arguments are what is sent
	}
	return c.Effect == "external"
}

// writesWorkspace reports whether a part writes a file of the workspace
// (not only the sandbox's scratch space), which outlives the run on the
// host.
func writesWorkspace(f *facts, mount string) bool {
	for _, w := range f.Written {
		if under(w, mount) {
			return true
		}
	}
	return false
}

// autorunNames are workspace files that run on their own on a person's
// machine, by base name, with who runs them: shells and direnv on
// entering the directory, test runners and Python on start, git's hook
// managers on its commands; and the instruction files a later agent run
// (Keel's, Claude Code's, Codex's...) follows as the project's own.
var autorunNames = map[string]string{
	".envrc":  "direnv runs it on entering the directory",
	".bashrc": "a shell runs it on start", ".bash_profile": "a shell runs it on start", ".profile": "a shell runs it on start",
	".zshrc": "a shell runs it on start", ".zshenv": "a shell runs it on start",
	"conftest.py": "pytest runs it", "pytest.ini": "pytest reads it (plugins, options)", "tox.ini": "tox runs its commands",
	"noxfile.py": "nox runs it", "sitecustomize.py": "Python runs it on start", "usercustomize.py": "Python runs it on start",
	".pre-commit-config.yaml": "pre-commit runs its hooks",
	".mise.toml":              "mise runs its hooks and tasks on entering the directory", "mise.toml": "mise runs its hooks and tasks on entering the directory",
	// Instructions that Keel and other agents put in a later run's system
	// prompt as the project's own: memory in all but name.
	"KEEL.md": "later agent runs follow it as the project's instructions", "AGENTS.md": "later agent runs follow it as the project's instructions",
	"CLAUDE.md": "later agent runs follow it as the project's instructions", "GEMINI.md": "later agent runs follow it as the project's instructions",
	".cursorrules": "later agent runs follow it as the project's instructions", ".windsurfrules": "later agent runs follow it as the project's instructions",
	".clinerules": "later agent runs follow it as the project's instructions", "copilot-instructions.md": "later agent runs follow it as the project's instructions",
}

// autorunDirs are workspace directories (and single files) whose files
// run on their own: editors on opening the folder, git on its
// commands, CI on a push.
var autorunDirs = []struct{ dir, why string }{
	{".vscode", "the editor runs its tasks and settings on opening the folder"},
	{".idea", "the IDE runs its run configurations and settings"},
	{".devcontainer", "the editor builds and runs it on opening the folder"},
	{".git/hooks", "git runs it on its commands"},
	{".githooks", "git runs it on its commands (core.hooksPath)"},
	{".husky", "git runs it on its commands (husky)"},
	{".github/workflows", "CI runs it on a push"},
	{".gitlab-ci.yml", "CI runs it on a push"},
	{".circleci", "CI runs it on a push"},
	{".claude", "Claude Code runs its hooks and follows its settings"},
	{".cursor", "the editor's agent follows its rules"},
	{".gemini", "Gemini CLI follows its settings"},
	// Rule directories of other agents: each file is instructions.
	{".clinerules", "later agent runs follow it as the project's instructions"},
	{".windsurf", "later agent runs follow it as the project's instructions"},
	{".github/instructions", "later agent runs follow it as the project's instructions"},
	{".junie", "later agent runs follow it as the project's instructions"},
	{".roo", "later agent runs follow it as the project's instructions"},
	{".amazonq/rules", "later agent runs follow it as the project's instructions"},
}

// AutorunWhy returns why the file at rel (a workspace-relative path)
// runs on its own on a person's machine, in a few words ("" when it does
// not): the files of context.autorun. A *.pth file runs when Python
// starts (in a site-packages directory), a virtual environment's
// bin/activate when a shell activates it, .git/config can name programs
// git runs.
func AutorunWhy(rel string) string {
	rel = strings.TrimPrefix(path.Clean("/"+rel), "/")
	base := path.Base(rel)
	switch {
	case rel == ".git/config":
		return "git reads it: it can name programs git runs (hooks path, filters, helpers)"
	case gitControlWhy(rel) != "":
		return gitControlWhy(rel)
	case autorunNames[base] != "":
		return autorunNames[base]
	case strings.HasSuffix(base, ".pth"):
		return "Python runs its import lines on start"
	case strings.HasPrefix(base, "activate") && path.Base(path.Dir(rel)) == "bin":
		return "a shell runs it when it activates the environment"
	}
	for _, d := range autorunDirs {
		if rel == d.dir || strings.HasPrefix(rel, d.dir+"/") {
			return d.why
		}
	}
	return ""
}

// ExecutesWhy returns why the file at rel (a workspace-relative path) is
// code that runs when a person runs the project, though its name does
// not say so ("" when it is not): Python's compiled bytecode (a .pyc in
// __pycache__ runs in place of its source when the stamp matches, which
// its writer sets), an installed package in a site-packages or
// dist-packages directory (a virtual environment's), the programs
// of node_modules/.bin that npm scripts and npx run, and the code of a
// node_modules package (its modules, its package.json, whose install
// scripts npm runs and whose main file node loads). Such files hide in
// directories git ignores.
func ExecutesWhy(rel string) string {
	rel = strings.TrimPrefix(path.Clean("/"+rel), "/")
	segs := strings.Split(rel, "/")
	switch {
	case strings.HasSuffix(rel, ".pyc"):
		return "Python runs compiled bytecode in place of its source file on import"
	case len(segs) >= 3 && segs[len(segs)-2] == ".bin" && segs[len(segs)-3] == "node_modules":
		return "npm scripts and npx run it"
	}
	if i := slices.Index(segs, "node_modules"); i >= 0 && i < len(segs)-2 && nodeCode(segs[len(segs)-1]) {
		if segs[len(segs)-1] == "package.json" {
			return "npm runs the install scripts its package.json names, and node loads the main file it names"
		}
		return "node runs it when the project requires the package (npm runs its install scripts)"
	}
	for _, s := range segs[:len(segs)-1] {
		if s == "site-packages" || s == "dist-packages" {
			return "Python runs it when the project imports the installed package"
		}
	}
	return ""
}

// nodeCode reports whether a file of a node_modules package, by its
// name, is code node or npm may run: a module (.js, .mjs, .cjs), a
// native addon (.node), WebAssembly, package.json (its scripts, its
// main file) or a file with no extension (a program its bin names).
func nodeCode(base string) bool {
	switch path.Ext(base) {
	case ".js", ".mjs", ".cjs", ".jsx", ".node", ".wasm":
		return true
	case "":
		return !strings.HasPrefix(base, ".") && base != "LICENSE" && base != "README" && base != "AUTHORS" && base != "CHANGELOG"
	}
	return base == "package.json"
}

// gitControlWhy says why a file under a .git directory of the workspace
// (the root's or a nested repository's, a submodule's or a worktree's)
// makes git run a program or read another configuration ("" when it
// does not): its config, hooks, a commondir or gitdir file, or a .git
// file, which sends git to another git directory.
func gitControlWhy(rel string) string {
	segs := strings.Split(rel, "/")
	for i, s := range segs {
		if s != ".git" {
			continue
		}
		rest := segs[i+1:]
		switch {
		case len(rest) == 0:
			return "git follows a .git file to another git directory and uses its config and hooks"
		case rest[len(rest)-1] == "config" || rest[len(rest)-1] == "config.worktree":
			return "git reads it: it can name programs git runs (hooks path, filters, helpers)"
		case rest[len(rest)-1] == "commondir" || rest[len(rest)-1] == "gitdir":
			return "it sends git to another git directory's config and hooks"
		case slices.Contains(rest, "hooks"):
			return "git runs it on its commands"
		case rest[0] == "rebase-merge" || rest[0] == "rebase-apply" || rest[0] == "sequencer":
			return "a rebase or cherry-pick in progress: git rebase --continue (cherry-pick --continue, am --continue) carries out what it holds, and a todo list's exec lines run commands"
		}
	}
	return ""
}

// autorun reports whether rel (workspace-relative) is a file that runs
// on its own (AutorunWhy); hides whether writing it hides files from
// git.
func autorun(rel string) (run, hides bool) {
	rel = strings.TrimPrefix(path.Clean("/"+rel), "/")
	base := path.Base(rel)
	if base == ".gitignore" || rel == ".git/info/exclude" || rel == ".gitattributes" || rel == ".git/config" {
		return rel == ".git/config", true
	}
	if why := gitControlWhy(rel); why != "" {
		// A config can also name an excludes file.
		return true, strings.HasSuffix(rel, "config")
	}
	if gitHistory(rel) {
		return false, true
	}
	return AutorunWhy(rel) != "" || ExecutesWhy(rel) != "", false
}

// autorunListed reports whether the file at abs is one of list
// ([Call].Autorun): an absolute path, or a pattern "DIR/**/GLOB" that
// names every file under DIR, at any depth, whose name matches GLOB
// (path.Match), such as the modules a stdio MCP server's script may
// import from its own directory.
func autorunListed(list []string, abs string) bool {
	abs = path.Clean(abs)
	for _, p := range list {
		dir, glob, ok := strings.Cut(p, "/**/")
		if !ok {
			if path.Clean(p) == abs {
				return true
			}
			continue
		}
		if !strings.HasPrefix(abs, strings.TrimSuffix(dir, "/")+"/") {
			continue
		}
		if m, err := path.Match(glob, path.Base(abs)); err == nil && m {
			return true
		}
	}
	return false
}

// gitHistory reports whether rel is where git keeps what a commit holds
// or which object stands for which: an object written there by hand,
// a replace ref, grafts or packed refs (which may hold replace refs)
// make git show other contents for the same commit.
func gitHistory(rel string) bool {
	for _, d := range []string{".git/objects", ".git/refs/replace"} {
		if rel == d || strings.HasPrefix(rel, d+"/") {
			return true
		}
	}
	return rel == ".git/info/grafts" || rel == ".git/packed-refs" || rel == ".git/shallow"
}

// persistence classifies the paths a part writes (absolute, under
// mount; extra are more files that run on their own, [Call].Autorun)
// and a git command that hides changes from git.
func persistence(cmd *bash.Command, written []string, mount string, extra []string) (run, hides bool) {
	for _, w := range written {
		if autorunListed(extra, w) {
			run = true
		}
		rel, ok := strings.CutPrefix(w, strings.TrimSuffix(mount, "/")+"/")
		if !ok {
			continue
		}
		r, h := autorun(rel)
		run, hides = run || r, hides || h
	}
	if cmd != nil && cmd.Name() == "git" {
		switch cmd.Subcommand() {
		case "replace":
			// git replace makes git show another object for a commit's.
			hides = true
		case "update-ref":
			for _, a := range cmd.Args() {
				if strings.HasPrefix(a, "refs/replace/") {
					hides = true
				}
			}
		}
		for _, a := range cmd.Args() {
			switch a {
			case "--assume-unchanged", "--skip-worktree", "update-index", "--intent-to-add":
				if slices.Contains(cmd.Args(), "update-index") {
					hides = true
				}
			}
		}
	}
	return run, hides
}

// envDump matches a command (as the JSON arguments of a bash call hold
// it) that reads the whole environment without naming a variable: a read
// of /proc/*/environ (cat, xxd, od, base64, strings, cp, tar ...), env or
// printenv without a command or name, set, export -p, declare -p/-x,
// typeset -p, compgen -e. Such a command carries every secret the
// sandbox holds. It is the fallback for a command line that does not
// parse; [dumpsEnv] reads the parsed commands, so that words in a
// here-document or a comment ("format is correctly set") do not count.
var envDump = lazy.Regexp(`/proc/[^/\s"]*/environ|(^|[;&|(\s"'` + "`" + `{])(?:(?:env|printenv)(?:\s+-[-\w]+)*|set|export\s+-p|(?:declare|typeset)\s+-[a-zA-Z]*[px][a-zA-Z]*|compgen\s+-[a-zA-Z]*e)\s*($|[;&|)}>"'` + "`" + `]|\\n|\\u00(?:3[ce]|26))`)

// jqEnv matches jq's builtin env or $ENV in a jq program.
var jqEnv = lazy.Regexp(`(^|[^A-Za-z0-9_$])(env|\$ENV)($|[^A-Za-z0-9_])`)

// procEnviron matches a path of a process's environment.
var procEnviron = lazy.Regexp(`/proc/[^/\s"]*/environ`)

// dumpsEnv reports whether a bash command line holds a command that
// reads the whole environment without naming a variable (see envDump),
// from its parsed commands: a word or redirection naming
// /proc/*/environ, env or printenv with no command or name, set alone,
// export -p, declare or typeset with -p or -x and no name, compgen -e.
func dumpsEnv(line string) bool {
	cmds, err := bash.Parse(line)
	if err != nil {
		return envDump().MatchString(line)
	}
	for i := range cmds {
		c := &cmds[i]
		if len(c.Words) == 0 {
			for _, r := range c.Redirects {
				if environPath(r.Target, true) {
					return true
				}
			}
			continue
		}
		name, rest := path.Base(c.Words[0]), c.Words[1:]
		if c.Prog < len(c.Words) {
			name, rest = c.Name(), c.Args()
		} else {
			// A wrapper with no command after it (nice env, timeout 5 env,
			// command env, exec env, xargs env): the last wrapper is
			// the program that runs.
			for j := len(c.Words) - 1; j >= 0; j-- {
				if b := path.Base(c.Words[j]); b == "env" || b == "printenv" {
					name, rest = b, c.Words[j+1:]
					break
				}
			}
		}
		for j, w := range c.Words {
			if environPath(w, j < len(c.Glob) && c.Glob[j] >= 0) {
				return true
			}
			if j > 0 && readsTree(name, rest) && environAncestor(w) {
				// grep -r TOKEN /proc/self/, tar -cf - /proc/self, find
				// /proc/self -exec cat {} +.
				return true
			}
		}
		for _, r := range c.Redirects {
			if environPath(r.Target, true) {
				return true
			}
		}
		if name == "ps" {
			// BSD-style e (ps eww, ps auxe) prints each process's
			// environment.
			for _, a := range rest {
				if !strings.HasPrefix(a, "-") && strings.Contains(a, "e") {
					return true
				}
			}
		}
		if name == "env" && slices.ContainsFunc(rest, func(a string) bool { return a == "-u" || strings.HasPrefix(a, "--unset") }) {
			// env -u NAME prints all the others.
			rest = nil
		}
		if len(rest) == 0 && (name == "export" || name == "declare" || name == "typeset") && bareDeclaration(c.Text, name) {
			// Bare export prints every exported variable, as export -p;
			// bare declare and typeset print every variable.
			return true
		}
		if len(c.Words) == 1 && (name == "declare" || name == "typeset" || name == "export" || name == "local" || name == "readonly") {
			// The parser keeps a declaration's options in its text only.
			if f := strings.Fields(c.Text); len(f) > 1 {
				rest = f[1:]
			}
		}
		options := func() (flags string, named bool) {
			for _, a := range rest {
				if strings.HasPrefix(a, "-") {
					flags += strings.TrimLeft(a, "-")
				} else {
					named = true
				}
			}
			return flags, named
		}
		flags, named := options()
		switch name {
		case "env", "printenv":
			if !named {
				return true
			}
		case "set":
			if len(rest) == 0 {
				return true
			}
		case "export":
			if strings.Contains(flags, "p") && !named {
				return true
			}
		case "declare", "typeset":
			if strings.ContainsAny(flags, "px") && !named {
				return true
			}
		case "compgen":
			if strings.Contains(flags, "e") {
				return true
			}
		case "jq", "gojq", "yq":
			// jq's env and $ENV are the whole environment (yq's env() and
			// strenv() too); a program from a file or a module (-f,
			// --from-file, -L, import, include) is one Keel cannot read.
			for _, a := range rest {
				if jqEnv().MatchString(a) || strings.Contains(a, "strenv") || a == "-L" || strings.HasPrefix(a, "-L") ||
					len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.Contains(a, "f") ||
					len(a) > 6 && strings.HasPrefix("--from-file", strings.SplitN(a, "=", 2)[0]) ||
					strings.Contains(a, "import") || strings.Contains(a, "include") {
					return true
				}
			}
		case "cd", "pushd":
			// A relative path after cd /proc/self (environ) is a read of
			// the environment the words do not spell.
			for _, a := range rest {
				if a == "/proc" || strings.HasPrefix(a, "/proc/") {
					return true
				}
			}
		case "awk", "gawk", "mawk", "nawk", "busybox-awk":
			for _, a := range rest {
				if strings.Contains(a, "ENVIRON") {
					return true
				}
			}
		}
	}
	return false
}

// bareDeclaration reports whether a declaration command's text (the
// parser keeps its options there only) has no word after the name but
// redirections: export > f, builtin export.
func bareDeclaration(text, name string) bool {
	fields := strings.Fields(text)
	k := -1
	for i, f := range fields {
		if f == name {
			k = i
			break
		}
	}
	if k < 0 {
		return false
	}
	for i := k + 1; i < len(fields); i++ {
		f := fields[i]
		switch {
		case strings.HasPrefix(f, ">") || strings.HasPrefix(f, "<") || strings.HasPrefix(f, "&>") || len(f) > 1 && f[0] >= '0' && f[0] <= '9' && strings.ContainsAny(f[1:2], "<>"):
			if strings.Trim(f, "0123456789&<>|") == "" {
				i++ // the target is the next word
			}
		default:
			return false
		}
	}
	return true
}

// environCandidates are paths of a process's environment a pattern may
// match.
var environCandidates = []string{"/proc/self/environ", "/proc/1/environ", "/proc/thread-self/environ", "/proc/self/task/1/environ", "/proc/1/task/1/environ"}

// environPath reports whether a word names a process's environment: a
// path /proc/PID/environ or a file named environ, or, when glob is set
// (the word is a pattern), a pattern that can match one
// (/proc/self/env*, /proc/*/e*n, /proc/self/*, ../env*).
func environPath(w string, glob bool) bool {
	if procEnviron().MatchString(w) || path.Base(w) == "environ" {
		return true
	}
	if !glob || !strings.ContainsAny(w, "*?[") {
		return false
	}
	for _, c := range environCandidates {
		if m, _ := path.Match(path.Clean(w), c); m {
			return true
		}
	}
	// A pattern matching environ in a directory that may be a process's
	// (/dev/fd/../env*).
	d := path.Dir(w)
	m, _ := path.Match(path.Base(w), "environ")
	return m && (strings.HasPrefix(d, "/proc") || strings.HasPrefix(d, "/dev") || strings.Contains(d, ".."))
}

// environAncestor reports whether a path word is a directory that holds a
// process's environment at some depth: /, /proc, /proc/self, /proc/PID,
// /proc/self/task/TID, or a pattern matching one.
func environAncestor(w string) bool {
	w = path.Clean(w)
	for _, c := range environCandidates {
		for d := path.Dir(c); ; d = path.Dir(d) {
			if m, _ := path.Match(w, d); m || w == d {
				return true
			}
			if d == "/" {
				break
			}
		}
	}
	return false
}

// readsTree reports whether a program reads the contents of the files
// under a directory it is given (grep -r, tar, zip, find, diff -r, cp -r,
// git grep): not ls, stat or the like, which only list it.
func readsTree(name string, args []string) bool {
	switch name {
	case "ls", "stat", "test", "[", "readlink", "realpath", "basename", "dirname", "du", "df", "cd", "pushd", "mkdir", "touch", "file", "echo", "printf":
		return false
	case "tar", "zip", "bsdtar", "cpio", "rsync", "7z", "strings":
		return true
	case "find":
		return slices.ContainsFunc(args, func(a string) bool {
			return strings.HasPrefix(a, "-exec") || strings.HasPrefix(a, "-ok") || strings.HasPrefix(a, "-fprint")
		})
	case "git":
		return slices.Contains(args, "--no-index")
	}
	return slices.ContainsFunc(args, func(a string) bool {
		return len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsAny(a[1:], "rRa") || a == "--recursive" || a == "--dereference-recursive" || a == "--archive"
	})
}

// showsSecret reports whether a part's text shows where a secret the
// call carries comes from: a value Keel sealed («secret:NAME...»), a
// reference to its variable, or a dump of the whole environment.
func showsSecret(text string, fl *Flow) bool {
	if fl == nil || len(fl.Secrets) == 0 {
		return false
	}
	if dumpsEnv(text) {
		return true
	}
	for _, s := range fl.Secrets {
		if strings.Contains(text, "«secret:"+s.Name) || strings.Contains(text, "$"+s.Name) || strings.Contains(text, "${"+s.Name) {
			return true
		}
	}
	return false
}

// ResolvedWords returns the words of every command a bash call's
// arguments (its JSON) would run, as the analysis resolves them (eval
// 'echo $API_'TOKEN is echo $API_TOKEN), one command per line; "" when
// the command line does not parse.
func ResolvedWords(args []byte) string {
	line, _ := argString(args, "command")
	cmds, err := bash.Parse(line)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, c := range cmds {
		b.WriteString(strings.Join(c.Words, " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// DumpsEnvironment reports whether a bash call's arguments (its JSON)
// hold a command that reads the whole environment without naming a
// variable (see envDump): it carries every secret the sandbox holds.
func DumpsEnvironment(args []byte) bool {
	line, clear := argString(args, "command")
	if !clear {
		return envDump().Match(args)
	}
	return dumpsEnv(line)
}
