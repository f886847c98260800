package agent

import (
	"encoding/json"
	"path"
	"slices"
	"strings"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy/bash"
)

// callKey is one spelling of a tool call for loop health: spellings that
// do the same thing give the same key, so a model cannot get past
// [turnSignature] by writing a repeated call another way. It is only
// ever compared together with the call's result (a false match needs the
// same result too), so it may merge spellings that could differ in
// effect, such as the order of a command's arguments.
//
// What counts as the same: the arguments as JSON values (key order,
// spacing, escapes); arguments at their zero value (0, "", false, null,
// empty lists) left out, as a tool reads a missing one; the time limit of
// a command; a path argument written "./x", "x/", "/workspace/x" or "x";
// and for a bash command line, what the gate's parser reads from it:
// quoting, comments, spacing and line breaks, "./" and the mount path
// before a path word, a "cd" into the workspace, the order of a command's arguments, and short
// options written together or apart ("-la", "-l -a"). A command with a
// here-document or an assignment before it is compared as written.
func callKey(c model.ToolCall, mount string) string {
	d := json.NewDecoder(strings.NewReader(c.Arguments))
	d.UseNumber()
	var args map[string]any
	if d.Decode(&args) != nil || d.More() || args == nil {
		return c.Name + "\x00" + canonicalArgs(c.Arguments)
	}
	if mount == "" {
		mount = "/workspace"
	}
	for k, v := range args {
		switch {
		case zeroJSON(v), c.Name == "bash" && k == "timeout_ms":
			delete(args, k)
		case k == "path":
			if s, ok := v.(string); ok {
				args[k] = cleanPathWord(s, mount)
			}
		case c.Name == "bash" && k == "command":
			if s, ok := v.(string); ok {
				args[k] = commandKey(s, mount)
			}
		}
	}
	b, err := json.Marshal(args)
	if err != nil {
		return c.Name + "\x00" + canonicalArgs(c.Arguments)
	}
	return c.Name + "\x00" + string(b)
}

// zeroJSON reports whether v, a decoded JSON value, is its type's zero.
func zeroJSON(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case bool:
		return !v
	case json.Number:
		f, err := v.Float64()
		return err == nil && f == 0
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

// maxKeyedCommand bounds the command lines [commandKey] parses; longer
// ones (a file written by a here-document, mostly) are compared as
// written.
const maxKeyedCommand = 4096

// commandKey is a bash command line as the gate's parser reads it: the
// words of each simple command in order, quoting and comments gone, path
// words cleaned, arguments sorted.
func commandKey(line, mount string) string {
	if len(line) > maxKeyedCommand {
		return line
	}
	cmds, err := bash.Parse(line)
	if err != nil || len(cmds) == 0 {
		return strings.Join(strings.Fields(line), " ")
	}
	var b strings.Builder
	for i := range cmds {
		c := &cmds[i]
		if keyAsWritten(c) {
			b.WriteString(c.Text)
			b.WriteString("\x00")
			continue
		}
		if c.Name() == "cd" && len(c.Args()) == 1 && c.Literal[len(c.Literal)-1] && cleanPathWord(c.Args()[0], mount) == "." && len(c.Redirects) == 0 {
			continue // "cd /workspace && cat x" is "cat x"
		}
		var args []string
		for j, w := range c.Words {
			if j <= c.Prog {
				continue
			}
			if !strings.HasPrefix(w, "--") && len(w) > 2 && w[0] == '-' && letters(w[1:]) {
				for _, r := range w[1:] {
					args = append(args, "-"+string(r))
				}
				continue
			}
			if j < len(c.Literal) && c.Literal[j] {
				w = cleanPathWord(w, mount)
			}
			args = append(args, w)
		}
		slices.Sort(args)
		args = slices.Compact(args)
		for _, w := range c.Words[:min(c.Prog+1, len(c.Words))] {
			b.WriteString(w)
			b.WriteString("\x01")
		}
		for _, w := range args {
			b.WriteString(w)
			b.WriteString("\x01")
		}
		for _, r := range c.Redirects {
			b.WriteString(r.Op)
			b.WriteString(cleanPathWord(r.Target, mount))
			b.WriteString("\x01")
		}
		b.WriteString("\x00")
	}
	return b.String()
}

// keyAsWritten reports whether c's words do not say all it does: it
// reads a here-document or a here-string, or sets variables for the
// program.
func keyAsWritten(c *bash.Command) bool {
	if len(c.Assigns) > 0 {
		return true
	}
	for _, r := range c.Redirects {
		if strings.HasPrefix(r.Op, "<<") {
			return true
		}
	}
	return false
}

// letters reports whether s is ASCII letters only.
func letters(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; c < 'a' || c > 'z' {
			return false
		}
	}
	return s != ""
}

// cleanPathWord spells a path word one way: "./" and the mount path
// before it, a trailing "/" and "." segments removed ("." for the
// workspace itself). Other words are returned as they are.
func cleanPathWord(w, mount string) string {
	switch {
	case w == mount || w == mount+"/":
		return "."
	case strings.HasPrefix(w, mount+"/"):
		w = w[len(mount)+1:]
	case strings.HasPrefix(w, "./"), strings.HasSuffix(w, "/") && len(w) > 1, strings.Contains(w, "/./"):
	default:
		return w
	}
	return path.Clean(w)
}
