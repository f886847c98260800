package agent

import (
	"encoding/json"
	"testing"
)

// A bash command that dumps the whole environment carries every secret
// the sandbox holds, though it names none (so secret-written asks when
// it writes the dump into the workspace).
func TestScanEnvironmentDump(t *testing.T) {
	sc := newSecretScanner([]Secret{{Name: "API_TOKEN", Value: "sk-canary6-0123456789abcdef"}}, []string{"API_TOKEN"})
	for _, tc := range []struct {
		cmd   string
		carry bool
	}{
		{"env > e1.txt", true},
		{"printenv > e.txt", true},
		{"printenv", true},
		{"env -0 >e", true},
		{"xxd /proc/self/environ > e2.txt", true},
		{"od -c /proc/self/environ > e3.txt", true},
		{"base64 -w 16 < /proc/self/environ > e4.txt", true},
		{"cp /proc/1/environ e.txt", true},
		{"export -p > e.txt", true},
		{"set > e.txt", true},
		{"cd x && set\necho", true},
		{"declare -p > e", true},
		{"declare -x", true},
		{"typeset -p >e", true},
		{"jq -n env > e.txt", true},
		{"ls > e.txt", false},
		{"env FOO=1 make > out.txt", false},
		{"set -e; make > out.txt", false},
		{"echo environment > e.txt", false},
		{"go env GOPATH > e.txt", false},
		{"awk 'BEGIN{for (k in ENVIRON) print k\"=\"ENVIRON[k]}' > e.txt", true},
		{"jq -n '$ENV' > e.txt", true},
		{"jq .name package.json > e.txt", false},
		{"jq -r '.items[] | .name' data.json", false},
		// The same in spellings the words do not show (fresh-user trial
		// 5, M8 and M14): a relative path after cd /proc/self, a jq
		// program from a file or a module, yq's strenv.
		{"cd /proc/self && tr '\\0' '\\n' < environ | sed 's/./&./g'", true},
		{"cd /proc && cat self/environ", true},
		{"pushd /proc/self; rev < ./environ", true},
		{"jq -nr -f prog.jq", true},
		{"jq -n --from-file prog.jq", true},
		{"jq -n --from-f=prog.jq", true},
		{"jq -L . -n 'import \"m\" as m; m::f'", true},
		{"jq -n 'include \"m\"; f'", true},
		{"yq -n 'strenv(API_TOKEN)'", true},
		// Globs, wrappers, declarations with nothing after them,
		// recursive readers of a process directory, ps e (fresh-user
		// trial 7, P2).
		{"cat /proc/self/env* | tr '\\0' '\\n'", true},
		{"cat /proc/self/e*n", true},
		{"head -c 9999 /proc/self/*", true},
		{"strings /proc/self/* | grep API", true},
		{"sort -u /proc/self/*", true},
		{"cat /proc/*/environ", true},
		{"cat /dev/fd/../env*", true},
		{"nice env | grep API_", true},
		{"timeout 5 env", true},
		{"stdbuf -o0 env", true},
		{"nohup env", true},
		{"exec env", true},
		{"command env", true},
		{"xargs -0 < /dev/null env", true},
		{"env -u HOME", true},
		{"export", true},
		{"export > e.txt", true},
		{"builtin export", true},
		{"eval export", true},
		{"sh -c export", true},
		{"declare", true},
		{"grep -ra TOKEN /proc/self/", true},
		{"grep -rah --include=environ API_ /proc/self/", true},
		{"find /proc/self -maxdepth 1 -name 'env*' -exec cat {} +", true},
		{"tar -cf - /proc/self/ | tar -xOf - | grep -a API_", true},
		{"zip -r - /proc/self/ | unzip -p -", true},
		{"diff -r /proc/self /tmp/x", true},
		{"git grep --no-index -a -h API_ -- /proc/self/", true},
		{"grep -r API_ /", true},
		{"ps eww", true},
		{"ps auxe", true},
		{"eval 'echo $API_'TOKEN | rev", true},
		{"ls /proc/self/", false},
		{"cat src/*.py > all.txt", false},
		{"ps aux", false},
		{"ps -ef", false},
		{"export A=1 && make", false},
		{"nice make -j2", false},
		{"timeout 5 python3 t.py", false},
		{"grep -rn def src", false},
		{"find / -name '*.py'", false},
		// Words of a here-document or a comment are not commands (the
		// recorded marshmallow run writes "# ... correctly set").
		{"cat > t.py << 'EOF'\n# Test that format is correctly set\nprint(1)\nEOF", false},
		{"echo done # then set", false},
	} {
		args, _ := json.Marshal(map[string]string{"command": tc.cmd})
		got := len(sc.scan("bash", args)) > 0
		if got != tc.carry {
			t.Errorf("%q: carries a secret %v, want %v", tc.cmd, got, tc.carry)
		}
	}
}
