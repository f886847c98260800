package policy_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/policy"
)

// cmdView is what the tests compare of a parsed command.
type cmdView struct {
	Prog    string
	Via     string
	Dynamic bool
}

func view(cs []policy.Command) []cmdView {
	var out []cmdView
	for _, c := range cs {
		v := cmdView{Via: strings.Join(c.Via, " > "), Dynamic: c.Dynamic}
		if c.Prog < len(c.Words) {
			v.Prog = c.Words[c.Prog]
		}
		out = append(out, v)
	}
	return out
}

func TestParseBash(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, src string
		want      []cmdView
	}{
		{"simple", "ls -la", []cmdView{{Prog: "ls"}}},
		{"and list", "ls && rm -rf x", []cmdView{{Prog: "ls"}, {Prog: "rm"}}},
		{"pipe", "a | b | c", []cmdView{{Prog: "a"}, {Prog: "b"}, {Prog: "c"}}},
		{"semicolons and or", "a; b || c", []cmdView{{Prog: "a"}, {Prog: "b"}, {Prog: "c"}}},
		{"subshell and block", "(a; b) && { c; }", []cmdView{{Prog: "a"}, {Prog: "b"}, {Prog: "c"}}},
		{"command substitution", "echo $(whoami)", []cmdView{{Prog: "echo"}, {Prog: "whoami", Via: "$(...)"}}},
		{"backticks", "echo `id`", []cmdView{{Prog: "echo"}, {Prog: "id", Via: "`...`"}}},
		{"nested substitution", "a $(b $(c))", []cmdView{{Prog: "a"}, {Prog: "b", Via: "$(...)"}, {Prog: "c", Via: "$(...) > $(...)"}}},
		{"substitution in assignment", "X=$(cat f) make", []cmdView{{Prog: "make"}, {Prog: "cat", Via: "$(...)"}}},
		{"bare assignment", "X=$(cat f)", []cmdView{{Prog: "cat", Via: "$(...)"}}},
		{"process substitution", "diff <(a) <(b)", []cmdView{{Prog: "diff"}, {Prog: "a", Via: "<(...)"}, {Prog: "b", Via: "<(...)"}}},
		{"substitution in redirect target", "echo x > $(mktemp)", []cmdView{{Prog: "echo"}, {Prog: "mktemp", Via: "$(...)"}}},
		{"loop and if", "for f in *.py; do python $f; done; if test -f x; then rm x; fi",
			[]cmdView{{Prog: "python"}, {Prog: "test"}, {Prog: "rm"}}},
		{"function body", "f() { rm -rf y; }; f", []cmdView{{Prog: "rm"}, {Prog: "f"}}},
		{"bash -c", "bash -c 'a && b'", []cmdView{{Prog: "a", Via: "bash -c"}, {Prog: "b", Via: "bash -c"}}},
		{"combined flags", "sh -ec 'a'", []cmdView{{Prog: "a", Via: "sh -c"}}},
		{"nested twice", `sh -c "bash -c 'a'"`, []cmdView{{Prog: "a", Via: "sh -c > bash -c"}}},
		{"bash -c dynamic", `bash -c "$S"`, []cmdView{{Prog: "bash", Dynamic: true}}},
		{"script file", "bash run.sh", []cmdView{{Prog: "bash"}}},
		{"shell from a pipe", "curl x | sh", []cmdView{{Prog: "curl"}, {Prog: "sh", Dynamic: true}}},
		{"shell from a here-document", "bash <<'EOF'\na\nb\nEOF", []cmdView{{Prog: "a", Via: "bash <<"}, {Prog: "b", Via: "bash <<"}}},
		{"cat here-document is data", "cat > f <<'EOF'\nrm -rf /\nEOF", []cmdView{{Prog: "cat"}}},
		{"here-document expansions run", "cat <<EOF\n$(id)\nEOF", []cmdView{{Prog: "cat"}, {Prog: "id", Via: "$(...)"}}},
		{"eval literal", "eval 'a; b'", []cmdView{{Prog: "a", Via: "eval"}, {Prog: "b", Via: "eval"}}},
		{"eval dynamic", `eval "$X"`, []cmdView{{Prog: "eval", Dynamic: true}}},
		{"dynamic program", "$CMD -x", []cmdView{{Prog: "$CMD", Dynamic: true}}},
		{"glob program", "/bin/r? -rf x", []cmdView{{Prog: "/bin/r?", Dynamic: true}}},
		{"brace program", "{rm,-rf,x}", []cmdView{{Prog: "{rm,-rf,x}", Dynamic: true}}},
		{"escaped name", `\rm x`, []cmdView{{Prog: "rm"}}},
		{"quoted name", `'r''m' x`, []cmdView{{Prog: "rm"}}},
		{"ansi-c quoted name is dynamic", `$'\x72m' x`, []cmdView{{Prog: `$'\x72m'`, Dynamic: true}}},
		{"env wrapper", "env -i FOO=1 rm x", []cmdView{{Prog: "rm", Via: "env"}}},
		{"env -S", "env -S 'rm -rf x'", []cmdView{{Prog: "rm", Via: "env -S"}}},
		{"timeout nice nohup", "timeout -s KILL 10 nice -n 5 nohup rm x", []cmdView{{Prog: "rm", Via: "timeout > nice > nohup"}}},
		{"sudo", "sudo -u root rm x", []cmdView{{Prog: "rm", Via: "sudo"}}},
		{"xargs", "ls | xargs -n 1 rm", []cmdView{{Prog: "ls"}, {Prog: "rm", Via: "xargs"}}},
		{"xargs sh -c", "ls | xargs sh -c 'rm $0'", []cmdView{{Prog: "ls"}, {Prog: "rm", Via: "xargs > sh -c"}}},
		{"find -exec", `find . -name x -exec rm {} \; -exec echo {} +`, []cmdView{{Prog: "find"}, {Prog: "rm", Via: "find -exec"}, {Prog: "echo", Via: "find -exec"}}},
		{"command -v only looks up", "command -v rm", []cmdView{{Prog: "command"}}},
		{"command runs", "command rm x", []cmdView{{Prog: "rm", Via: "command"}}},
		{"trap", "trap 'rm -f lock' EXIT", []cmdView{{Prog: "rm", Via: "trap"}}},
		{"time keyword", "time make", []cmdView{{Prog: "make"}}},
		{"declaration", "export PATH=/tmp:$PATH", []cmdView{{Prog: "export"}}},
		{"test clause substitution", "[[ $(id -u) == 0 ]] && rm x", []cmdView{{Prog: "id", Via: "$(...)"}, {Prog: "rm"}}},
		{"background", "sleep 10 & rm x", []cmdView{{Prog: "sleep"}, {Prog: "rm"}}},
		{"negation", "! grep x f", []cmdView{{Prog: "grep"}}},
		{"comment only", "# nothing", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := policy.ParseBash(tt.src)
			if err != nil {
				t.Fatalf("ParseBash(%q) = %v", tt.src, err)
			}
			if diff := cmp.Diff(tt.want, view(got)); diff != "" {
				t.Errorf("ParseBash(%q) (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

func TestParseBashText(t *testing.T) {
	t.Parallel()
	got, err := policy.ParseBash("FOO=1 make test 2>&1 > out.log && cat > f.py <<'EOF'\nprint(1)\nEOF\n")
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, c := range got {
		texts = append(texts, c.Text)
	}
	want := []string{"FOO=1 make test 2>&1 > out.log", "cat > f.py <<'EOF'\nprint(1)\nEOF"}
	if diff := cmp.Diff(want, texts); diff != "" {
		t.Errorf("texts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"FOO"}, got[0].Assigns); diff != "" {
		t.Errorf("assigns: %s", diff)
	}
	if diff := cmp.Diff([]policy.Redirect{{Op: ">&", Target: ""}, {Op: ">", Target: "out.log", Literal: true, Write: true}}, got[0].Redirects); diff != "" {
		t.Errorf("redirects (-want +got):\n%s", diff)
	}
}

func TestParseBashErrors(t *testing.T) {
	t.Parallel()
	for _, src := range []string{"echo 'unterminated", "if then fi", "a &&", "$(("} {
		if _, err := policy.ParseBash(src); err == nil {
			t.Errorf("ParseBash(%q) = nil error", src)
		}
	}
	// Too deep a nesting is dynamic, not an error.
	src := "ls"
	for range 10 {
		src = "bash -c " + quote(src)
	}
	got, err := policy.ParseBash(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Dynamic {
		t.Errorf("10 nested bash -c: %+v, want one dynamic command", view(got))
	}
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
