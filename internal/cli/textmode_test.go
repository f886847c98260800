package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// promptFollower is a fake OpenAI-compatible model that does what the
// system prompt it receives says: it refuses a prompt with tool-mode
// advice a model without tools cannot follow, takes the completion
// marker from the finishing rule, makes one change in a bash block, then
// finishes with the marker. With usage false it reports no usage.
type promptFollower struct {
	usage bool

	mu      sync.Mutex
	systems []string
}

var markerRule = regexp.MustCompile("finish with a ```bash block whose first line of output is (\\S+);")

func (f *promptFollower) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 || req.Messages[0].Role != "system" {
		http.Error(w, "want a system message first", http.StatusBadRequest)
		return
	}
	system := req.Messages[0].Content
	f.mu.Lock()
	f.systems = append(f.systems, system)
	f.mu.Unlock()
	turns := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			turns++
		}
	}
	var reply string
	switch m := markerRule.FindStringSubmatch(system); {
	case len(req.Tools) > 0:
		reply = "I was offered function-calling tools in text mode."
	case strings.Contains(system, "todo tool") || strings.Contains(system, "file tools") || strings.Contains(system, "call no tool"):
		reply = "Done, as the prompt says: a short summary and no action." // the report's t2 model
	case m == nil:
		reply = "I do not know how to finish."
	case turns == 0:
		reply = "I will make the change.\n```bash\necho changed > out.txt\n```"
	default:
		reply = "Finishing.\n```bash\necho " + m[1] + " && cat out.txt\n```"
	}
	resp := map[string]any{
		"id": "r", "object": "chat.completion", "model": "follower",
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": reply}, "finish_reason": "stop"}},
	}
	if f.usage {
		resp["usage"] = map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// A text-mode run whose model follows the system prompt completes
// through the marker: the prompt states it from the first request and
// gives no tool-mode advice. A provider that reports no usage is counted
// with Keel's estimate, said once on stderr and in runs show.
func TestTextModeFollowsPrompt(t *testing.T) {
	for _, tt := range []struct {
		name  string
		usage bool
	}{
		{"usage reported", true},
		{"no usage reported", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := setup(t)
			f := &promptFollower{usage: tt.usage}
			srv := httptest.NewServer(f)
			t.Cleanup(srv.Close)
			ws := t.TempDir()
			code, out, errOut := keel(t, "run", "--sandbox", "none", "--action-mode", "text", "--model", "openai-compatible:follower@"+srv.URL+"/v1", "--workspace", ws, "change it")
			if code != 0 || strings.TrimSpace(out) != "changed" {
				t.Fatalf("keel run = %d, stdout %q\nstderr: %s\nfirst system prompt:\n%s", code, out, errOut, f.systems[0])
			}
			_, st := lastRun(t, db)
			if st.Ended.Reason != "marker" || st.Steps != 2 {
				t.Errorf("ended %+v after %d steps", st.Ended, st.Steps)
			}
			note := "provider reported no token usage"
			if n := strings.Count(errOut, note); tt.usage && n != 0 || !tt.usage && n != 1 {
				t.Errorf("stderr says %q %d times:\n%s", note, n, errOut)
			}
			if !tt.usage && st.Usage.InputTokens < 100 {
				t.Errorf("estimated usage %+v", st.Usage)
			}
			code, show, _ := keel(t, "runs", "show", st.RunID)
			if want := fmt.Sprintf("no token usage for %d of 2 steps", 2); code != 0 || strings.Contains(show, want) == tt.usage {
				t.Errorf("runs show = %d, want %q: %v\n%s", code, want, !tt.usage, show)
			}
			if !tt.usage {
				// A follow-up in another process says it once there too
				// (a person may not have seen the first; trial 9, N4).
				code, _, errOut := keel(t, "runs", "resume", st.RunID, "--message", "once more")
				if n := strings.Count(errOut, note); code != 0 || n != 1 {
					t.Errorf("a follow-up = %d, stderr says %q %d times:\n%s", code, note, n, errOut)
				}
			}
		})
	}
}
