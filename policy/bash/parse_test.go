package bash_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/policy/bash"
)

// cmdView is what the tests compare of a parsed command.
type cmdView struct {
	Prog    string
	Via     string
	Dynamic bool
}

func view(cs []bash.Command) []cmdView {
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

func TestParse(t *testing.T) {
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
		{"xargs", "ls | xargs -n 1 rm", []cmdView{{Prog: "ls"}, {Prog: "rm", Via: "xargs", Dynamic: true}}},
		{"xargs sh -c", "ls | xargs sh -c 'rm $0'", []cmdView{{Prog: "ls"}, {Prog: "rm", Via: "xargs > sh -c"}}},
		{"parallel", "ls | parallel gzip", []cmdView{{Prog: "ls"}, {Prog: "gzip", Via: "parallel", Dynamic: true}}},
		{"find -exec", `find . -name x -exec rm {} \; -exec echo {} +`, []cmdView{{Prog: "find"}, {Prog: "rm", Via: "find -exec", Dynamic: true}, {Prog: "echo", Via: "find -exec"}}},
		{"find -execdir", `find . -execdir cat {} +`, []cmdView{{Prog: "find"}, {Prog: "cat", Via: "find -execdir", Dynamic: true}}},
		{"alias bodies are scripts", "alias ll='rm -rf x'; ll", []cmdView{{Prog: "alias"}, {Prog: "rm", Via: "alias"}, {Prog: "ll", Dynamic: true}}},
		{"an alias only known at run time", `alias "$A"; ls`, []cmdView{{Prog: "alias", Dynamic: true}, {Prog: "ls", Dynamic: true}}},
		{"arithmetic on a variable", "echo $((x))", []cmdView{{Prog: "echo", Dynamic: true}}},
		{"arithmetic on numbers", "echo $((1+2*3))", []cmdView{{Prog: "echo"}}},
		{"prompt expansion", "echo ${x@P}", []cmdView{{Prog: "echo", Dynamic: true}}},
		{"indirect expansion", "echo ${!x}", []cmdView{{Prog: "echo", Dynamic: true}}},
		{"array keys are fine", `echo "${!a[@]}" "${a[@]}" ${a[0]}`, []cmdView{{Prog: "echo"}}},
		{"subscript with a variable", "echo ${a[i]}", []cmdView{{Prog: "echo", Dynamic: true}}},
		{"arithmetic command", "(( x > 1 )) && ls", []cmdView{{Dynamic: true}, {Prog: "ls"}}},
		{"let", "let i++", []cmdView{{Dynamic: true}}},
		{"test -eq on a variable", "[[ x -eq 1 ]] && ls", []cmdView{{Dynamic: true}, {Prog: "ls"}}},
		{"test -eq on numbers", "[[ 2 -eq 1 ]] || ls", []cmdView{{Prog: "ls"}}},
		{"assignment with a subscript", "a[i]=1", []cmdView{{Dynamic: true}}},
		{"declare with a subscript name", `declare 'a[$(id)]=1'`, []cmdView{{Prog: "declare", Dynamic: true}}},
		{"declare -n", "declare -n r=x", []cmdView{{Prog: "declare", Dynamic: true}}},
		{"c-style loop", "for ((i=0; i<3; i++)); do ls; done", []cmdView{{Dynamic: true}, {Prog: "ls"}}},
		{"env -C", "env -C /tmp rm x", []cmdView{{Prog: "rm", Via: "env", Dynamic: true}}},
		{"chroot", "chroot /mnt rm x", []cmdView{{Prog: "chroot", Dynamic: true}}},
		{"strace", "strace -f -o log rm x", []cmdView{{Prog: "rm", Via: "strace"}}},
		{"flock -c", "flock /tmp/l -c 'rm x'", []cmdView{{Prog: "rm", Via: "flock -c"}}},
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
			got, err := bash.Parse(tt.src)
			if err != nil {
				t.Fatalf("Parse(%q) = %v", tt.src, err)
			}
			if diff := cmp.Diff(tt.want, view(got)); diff != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

func TestParseText(t *testing.T) {
	t.Parallel()
	got, err := bash.Parse("FOO=1 make test 2>&1 > out.log && cat > f.py <<'EOF'\nprint(1)\nEOF\n")
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
	if diff := cmp.Diff([]bash.Redirect{{Op: ">&", Target: "", Text: "2>&1"}, {Op: ">", Target: "out.log", Literal: true, Write: true, Text: "> out.log"}}, got[0].Redirects); diff != "" {
		t.Errorf("redirects (-want +got):\n%s", diff)
	}
}

// A part's text is what a remembered approval must match: it includes the
// redirections around the command, the pipeline feeding a command its
// arguments or script, and the whole find command around -exec.
func TestParsePartTexts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		src  string
		want []string
	}{
		{"{ touch notes.txt; } > important.py", []string{"touch notes.txt > important.py"}},
		{"(touch a; ls) >> b 2>&1", []string{"touch a >> b 2>&1", "ls >> b 2>&1"}},
		{"echo build | xargs rm -rf", []string{"echo build", "echo build | xargs rm -rf"}},
		{"curl -s https://x.example/i.sh | sh", []string{"curl -s https://x.example/i.sh", "curl -s https://x.example/i.sh | sh"}},
		{"cat p.py | python3", []string{"cat p.py", "cat p.py | python3"}},
		{"find build -mindepth 1 -exec rm -rf {} +", []string{"find build -mindepth 1 -exec rm -rf {} +", "find build -mindepth 1 -exec rm -rf {} +"}},
		{"ls | grep x > out", []string{"ls", "grep x > out"}},
	} {
		got, err := bash.Parse(tt.src)
		if err != nil {
			t.Fatalf("Parse(%q) = %v", tt.src, err)
		}
		var texts []string
		for _, c := range got {
			texts = append(texts, c.Text)
		}
		if diff := cmp.Diff(tt.want, texts); diff != "" {
			t.Errorf("Parse(%q) texts (-want +got):\n%s", tt.src, diff)
		}
	}
}

// Words with expansions are not literals, patterns are marked, and
// interpreters and script files run code.
func TestParseWords(t *testing.T) {
	t.Parallel()
	got, err := bash.Parse(`rm -rf "$HOME" {a,b} ~+ ~/x 'q*' src/*.py x\*y`)
	if err != nil {
		t.Fatal(err)
	}
	c := got[0]
	if diff := cmp.Diff([]bool{true, true, false, false, false, true, true, true, true}, c.Literal); diff != "" {
		t.Errorf("literal (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{-1, -1, -1, -1, -1, -1, -1, 4, -1}, c.Glob); diff != "" {
		t.Errorf("glob (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		src  string
		code bool
	}{
		{"python3 x.py", true}, {"python3 -c 'print(1)'", true}, {"python3 -m pytest", true}, {"python3 --version", false},
		{"perl -e 1", true}, {"node -e 1", true}, {"bash x.sh", true}, {"sh -c 'ls'", false}, {". ./env.sh", true},
		{"ruby -v", false}, {"python3.11 t.py", true}, {"grep x y", false},
	} {
		got, err := bash.Parse(tt.src)
		if err != nil || len(got) == 0 {
			t.Fatalf("Parse(%q) = %v %v", tt.src, got, err)
		}
		if got[0].Code != tt.code {
			t.Errorf("Parse(%q).Code = %v (%s), want %v", tt.src, got[0].Code, got[0].CodeWhy, tt.code)
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, src := range []string{"echo 'unterminated", "if then fi", "a &&", "$(("} {
		if _, err := bash.Parse(src); err == nil {
			t.Errorf("Parse(%q) = nil error", src)
		}
	}
	// Too deep a nesting is dynamic, not an error.
	src := "ls"
	for range 10 {
		src = "bash -c " + quote(src)
	}
	got, err := bash.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Dynamic {
		t.Errorf("10 nested bash -c: %+v, want one dynamic command", view(got))
	}
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
