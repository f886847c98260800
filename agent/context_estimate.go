package agent

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/keel-run/keel/model"
)

// Family is a group of models that share a tokenizer and a typical
// context window, for estimating request sizes without a tokenizer.
type Family struct {
	// Name is the family's id as stored in [ContextConfig].Family.
	Name string
	// Window is the family's usual context window in tokens.
	Window int
	// Scale converts Keel's piece count (see [EstimateText]) into the
	// family's tokens.
	Scale float64
}

// families maps model-name fragments to families, most specific first.
// Windows are the providers' published limits for the current models of
// each family; Scale was fitted on recorded usage where Keel has it
// (DeepSeek: docs/context.md, "Estimator accuracy") and is otherwise a
// conservative guess (more tokens rather than fewer).
var families = []struct {
	match []string
	fam   Family
}{
	{[]string{"claude"}, Family{"anthropic", 200000, 1.10}},
	{[]string{"gpt-4.1"}, Family{"openai", 1047576, 1.0}},
	{[]string{"gpt-5"}, Family{"openai", 400000, 1.0}},
	{[]string{"gpt-4o", "o1", "o3", "o4"}, Family{"openai", 128000, 1.0}},
	{[]string{"gpt-4-turbo"}, Family{"openai", 128000, 1.0}},
	{[]string{"gpt-3.5"}, Family{"openai", 16385, 1.0}},
	{[]string{"deepseek"}, Family{"deepseek", 128000, 0.94}},
	{[]string{"qwen"}, Family{"qwen", 32768, 1.05}},
	{[]string{"llama"}, Family{"llama", 128000, 1.05}},
	{[]string{"mistral", "codestral", "devstral"}, Family{"mistral", 128000, 1.10}},
	{[]string{"gemini"}, Family{"gemini", 1048576, 1.0}},
}

// GenericFamily is the family of models Keel does not know: a 32,768
// token window (local servers often run smaller contexts than the model
// supports) and no scaling.
var GenericFamily = Family{Name: "generic", Window: 32768, Scale: 1.0}

// LookupFamily returns the [Family] of a model name such as
// "deepseek-chat", "claude-sonnet-4-5" or "openai:gpt-4o" (matched by
// case-insensitive fragments), or [GenericFamily] when none matches.
func LookupFamily(modelName string) Family {
	n := strings.ToLower(modelName)
	for _, f := range families {
		for _, m := range f.match {
			if strings.Contains(n, m) {
				return f.fam
			}
		}
	}
	return GenericFamily
}

// familyByName returns the family with the given Name, or GenericFamily.
func familyByName(name string) Family {
	for _, f := range families {
		if f.fam.Name == name {
			return f.fam
		}
	}
	return GenericFamily
}

// Token estimation overheads, in pieces: every message carries role and
// separator tokens, every tool a wrapper around its schema, every request
// a few framing tokens.
const (
	perMessagePieces = 4
	perToolPieces    = 8
	perRequestPieces = 3
)

// EstimateText returns the number of BPE-like pieces in s, Keel's
// tokenizer-free estimate of its token count: a run of ASCII letters
// counts one piece per 6 letters (common words are one token), each
// digit one piece, a run of spaces or newlines one piece per 8 after
// the first, every other ASCII character one piece, and every non-ASCII
// character one piece. On the recorded DeepSeek trajectory this is
// within a few percent of the provider's count once scaled
// (docs/context.md).
func EstimateText(s string) int {
	n := 0
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z') {
				j++
			}
			n += (j - i + 5) / 6
			i = j
		case c >= '0' && c <= '9':
			n++
			i++
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
			j := i + 1
			for j < len(s) && (s[j] == ' ' || s[j] == '\n' || s[j] == '\t' || s[j] == '\r') {
				j++
			}
			n += (j - i - 1 + 7) / 8
			i = j
		case c < utf8.RuneSelf:
			n++
			i++
		default:
			_, size := utf8.DecodeRuneInString(s[i:])
			n++
			i += size
		}
	}
	return n
}

// estimateMessage returns the pieces of one message. Tool call ids count
// as a constant: providers' chat templates render them compactly or not
// at all (fitting the recorded DeepSeek usage confirmed it).
func estimateMessage(m *model.Message) int {
	n := perMessagePieces + EstimateText(m.Content)
	for _, c := range m.ToolCalls {
		n += perMessagePieces + EstimateText(c.Name) + EstimateText(c.Arguments)
	}
	return n
}

// estimateTools returns the pieces of the tool schemas.
func estimateTools(tools []model.ToolSpec) int {
	n := 0
	for i := range tools {
		t := &tools[i]
		n += perToolPieces + EstimateText(t.Name) + EstimateText(t.Description) + EstimateText(string(t.Parameters))
	}
	return n
}

// scale converts pieces to a family's tokens, rounding up.
func (f Family) scale(pieces int) int {
	s := f.Scale
	if s <= 0 {
		s = 1
	}
	return int(float64(pieces)*s + 0.999)
}

// EstimateRequest returns the estimated prompt tokens of req for models
// of family f: system prompt, tool schemas and messages, with per-message
// overheads. It is a pure function (the step function uses it).
func EstimateRequest(req *model.Request, f Family) int {
	n := perRequestPieces + EstimateText(req.System) + estimateTools(req.Tools)
	for i := range req.Messages {
		n += estimateMessage(&req.Messages[i])
	}
	return f.scale(n)
}

// PrefixTokens returns the estimated tokens of the fixed prefix of the
// run's requests for family f: the system prompt (with memory) and the
// tool schemas, which stay the same from step to step so that provider
// prompt caching applies.
func PrefixTokens(s *State, f Family) int {
	req := &model.Request{System: systemPrompt(s.Created), Tools: toolSpecs(s.Created)}
	return EstimateRequest(req, f)
}

// MinContextRoom is the room, in tokens, a context window must leave
// beyond the fixed part of every request (see [MinContextWindow]) for the
// conversation and the answer: below it no turn with a result fits, and
// every compaction is in vain.
const MinContextRoom = 2000

// ContextFloor is the smallest context window a run can work in, and the
// fixed part of its requests that it follows from, in estimated tokens
// of the run's model family.
type ContextFloor struct {
	// System is the system prompt with the memory files.
	System int
	// Tools is the tool schemas.
	Tools int
	// Task is the task, which is never compacted.
	Task int
	// Min is System + Tools + Task + [MinContextRoom].
	Min int
}

// TooSmall is the one refusal of a context window smaller than f.Min, in
// every front end (a run's create and resume, local or through the API):
// what names the window ("--context-window 10", "the model family's
// context window (8,192 tokens)"). Its advice is the caller's to take
// (a flag or the API's context_window), so it does not follow "; ",
// after which the API drops advice about the server process's flags.
func (f ContextFloor) TooSmall(what string) string {
	return fmt.Sprintf("%s is too small for this run: every request carries %s tokens that never leave it (system prompt and memory %s, tool schemas %s, task %s), and a window needs at least %s tokens more for the conversation and the answer: pass --context-window %d or more (context_window in the API; or a negative value to never compact)",
		what, Num(int64(f.System+f.Tools+f.Task)), Num(int64(f.System)), Num(int64(f.Tools)), Num(int64(f.Task)), Num(MinContextRoom), f.Min)
}

// MinContextWindow returns the floor of the run created as c: a window
// smaller than its Min cannot hold one request with a turn in it. The
// family is c.Context.Family, else the one of c.Model. Callers (the
// command line) refuse smaller windows with these numbers in the error.
func MinContextWindow(c *RunCreated) ContextFloor {
	fam := LookupFamily(c.Model)
	if c.Context != nil && c.Context.Family != "" {
		fam = familyByName(c.Context.Family)
	}
	task := []model.Message{{Role: model.RoleUser, Content: c.Task}}
	system := EstimateRequest(&model.Request{System: systemPrompt(c)}, fam)
	taskOnly := EstimateRequest(&model.Request{Messages: task}, fam) - EstimateRequest(&model.Request{}, fam)
	total := EstimateRequest(&model.Request{System: systemPrompt(c), Tools: toolSpecs(c), Messages: task}, fam)
	f := ContextFloor{System: system, Task: taskOnly, Tools: total - system - taskOnly}
	f.Min = total + MinContextRoom
	return f
}
