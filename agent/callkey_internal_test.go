package agent

import (
	"encoding/json"
	"testing"

	"github.com/keel-run/keel/model"
)

// Spellings of one call share a key; calls that do different things do
// not.
func TestCallKey(t *testing.T) {
	sh := func(cmd string) model.ToolCall {
		b, _ := json.Marshal(map[string]string{"command": cmd})
		return model.ToolCall{Name: "bash", Arguments: string(b)}
	}
	read := func(args string) model.ToolCall { return model.ToolCall{Name: "read_file", Arguments: args} }
	for _, tt := range []struct {
		name string
		a, b model.ToolCall
		same bool
	}{
		{"comment", sh("cat notes.txt"), sh("cat notes.txt  # again"), true},
		{"quotes", sh("cat notes.txt"), sh(`cat "notes.txt"`), true},
		{"single quotes", sh("cat notes.txt"), sh(`cat 'notes.txt'`), true},
		{"dot slash", sh("cat notes.txt"), sh("cat ./notes.txt"), true},
		{"mount path", sh("cat notes.txt"), sh("cat /workspace/notes.txt"), true},
		{"cd into the workspace", sh("cat notes.txt"), sh("cd /workspace && cat notes.txt"), true},
		{"line continuation", sh("cat notes.txt"), sh("cat \\\n notes.txt"), true},
		{"option grouping", sh("ls -la src"), sh("ls -a -l src/"), true},
		{"argument order", sh("grep -n foo a.py"), sh("grep foo -n a.py"), true},
		{"time limit", sh("make test"), model.ToolCall{Name: "bash", Arguments: `{"command":"make test","timeout_ms":9000}`}, true},
		{"file path", read(`{"path":"src/a.py"}`), read(`{"path":"/workspace/src/./a.py","offset":0}`), true},
		{"json spelling", read(`{"path":"a","limit":5}`), read(`{ "limit" : 5, "path" : "\u0061" }`), true},
		{"other file", sh("cat notes.txt"), sh("cat other.txt"), false},
		{"other program", sh("cat notes.txt"), sh("wc notes.txt"), false},
		{"other option", sh("ls -la"), sh("ls -lh"), false},
		{"redirect target", sh("echo x > a"), sh("echo x > b"), false},
		{"pipeline", sh("cat a | grep x"), sh("cat a | grep y"), false},
		{"here-document body", sh("cat > f <<'EOF'\none\nEOF"), sh("cat > f <<'EOF'\ntwo\nEOF"), false},
		{"here-string", sh("python3 <<< 'print(1)'"), sh("python3 <<< 'print(2)'"), false},
		{"assignment", sh("X=1 make"), sh("X=2 make"), false},
		{"cd elsewhere", sh("cat notes.txt"), sh("cd sub && cat notes.txt"), false},
		{"other tool", read(`{"path":"a"}`), model.ToolCall{Name: "list_directory", Arguments: `{"path":"a"}`}, false},
		{"other limit", read(`{"path":"a","limit":5}`), read(`{"path":"a","limit":6}`), false},
		{"not json", model.ToolCall{Name: "x", Arguments: "{"}, model.ToolCall{Name: "x", Arguments: "{ "}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ka, kb := callKey(tt.a, "/workspace"), callKey(tt.b, "/workspace")
			if (ka == kb) != tt.same {
				t.Errorf("callKey(%s) = %q\ncallKey(%s) = %q\nsame = %v, want %v", tt.a.Arguments, ka, tt.b.Arguments, kb, ka == kb, tt.same)
			}
		})
	}
}
