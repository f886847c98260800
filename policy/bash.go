package policy

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Command is one simple command that a bash command line would run, as
// found by [ParseBash].
type Command struct {
	// Text is the command as written: its words and its own redirections,
	// followed by the body of any here-document it reads.
	Text string
	// Words are the command's words, env-prefix assignments excluded:
	// literal words unquoted ("'a b'" becomes "a b"), any other word as its
	// source text ("$HOME/x" stays "$HOME/x").
	Words []string
	// Literal[i] reports whether Words[i] is a literal: no expansion,
	// substitution or ANSI-C quoting in it.
	Literal []bool
	// Prog is the index in Words of the program that runs, after wrappers
	// such as env, timeout, nice or xargs; len(Words) when there is none
	// (a bare "env").
	Prog int
	// Assigns are the names of env-prefix assignments ("FOO=1 cmd") and
	// of assignments made by env.
	Assigns []string
	// Via lists what the command runs inside, outermost first: "$(...)",
	// "`...`", "<(...)", "bash -c", "eval", "trap", "env", "timeout",
	// "xargs", "find -exec"....
	Via []string
	// Redirects are the redirections that apply to the command: its own
	// and those of enclosing compound commands.
	Redirects []Redirect
	// Dynamic is set when what runs is only known at run time: the
	// program name is an expansion, or a nested script (bash -c, eval,
	// a shell reading standard input) is not a literal; Why says which.
	Dynamic bool
	Why     string
}

// Redirect is one redirection of a [Command].
type Redirect struct {
	// Op is the operator as written (">", ">>", "<", "&>", "<<"...).
	Op string
	// Target is the file name (literal, unquoted) or, when not literal,
	// its source text; empty for here-documents and fd duplications.
	Target string
	// Literal reports whether Target is a literal.
	Literal bool
	// Write is set for operators that write the target.
	Write bool
}

// Name returns the base name of the program the command runs ("rm" for
// "/bin/rm"), or "" when there is none.
func (c *Command) Name() string {
	if c.Prog >= len(c.Words) {
		return ""
	}
	return path.Base(c.Words[c.Prog])
}

// Args returns the program's arguments (the words after it).
func (c *Command) Args() []string {
	if c.Prog >= len(c.Words) {
		return nil
	}
	return c.Words[c.Prog+1:]
}

// AllLiteral reports whether every word of c is a literal.
func (c *Command) AllLiteral() bool {
	for _, l := range c.Literal {
		if !l {
			return false
		}
	}
	return true
}

// maxNesting bounds how deep nested scripts (bash -c inside eval inside
// bash -c...) are analysed; deeper ones are dynamic.
const maxNesting = 8

// ParseBash parses a bash command line and returns every simple command in
// it, in source order: the commands of pipelines, lists (&&, ||, ;),
// subshells, blocks, loops, conditionals and function bodies; those inside
// command and process substitutions ($(...), `...`, <(...)) and in
// redirection targets and unquoted here-documents; and those of nested
// scripts whose text is a literal: "bash -c SCRIPT" (and sh, dash, zsh,
// ksh), eval, trap, su -c, watch, a shell reading a literal here-document,
// and the command of find -exec. Wrappers (env, timeout, nice, nohup,
// stdbuf, setsid, command, exec, builtin, sudo, doas, xargs, ionice,
// time) are looked through: [Command.Prog] names what they run. A nested
// script that is not a literal gives a [Command] with Dynamic set.
//
// It returns an error when the line does not parse as bash; the runtime
// treats such a line as one dynamic part (the shell would reject it too,
// or the parser does not know a construct, and a person should look).
func ParseBash(src string) ([]Command, error) {
	p := &parser{}
	if err := p.parse(src, nil, 0); err != nil {
		return nil, err
	}
	return p.out, nil
}

type parser struct {
	out []Command
}

func (p *parser) parse(src string, via []string, depth int) error {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		return fmt.Errorf("policy: parse bash: %w", err)
	}
	w := &walker{p: p, src: src, depth: depth}
	for _, s := range f.Stmts {
		w.stmt(s, nil, via)
	}
	return nil
}

// walker walks one parsed script.
type walker struct {
	p     *parser
	src   string
	depth int
}

func (w *walker) text(from, to syntax.Pos) string {
	a, b := int(from.Offset()), int(to.Offset())
	if a < 0 || b > len(w.src) || a > b {
		return ""
	}
	return w.src[a:b]
}

// visit walks n for statements and substitutions below it; rs are the
// redirections of the enclosing compound commands.
func (w *walker) visit(n syntax.Node, rs []Redirect, via []string) {
	if n == nil {
		return
	}
	syntax.Walk(n, func(n syntax.Node) bool {
		switch x := n.(type) {
		case *syntax.Stmt:
			w.stmt(x, rs, via)
			return false
		case *syntax.CmdSubst:
			v := "$(...)"
			if x.Backquotes {
				v = "`...`"
			}
			for _, s := range x.Stmts {
				w.stmt(s, nil, with(via, v))
			}
			return false
		case *syntax.ProcSubst:
			for _, s := range x.Stmts {
				w.stmt(s, nil, with(via, "<(...)"))
			}
			return false
		}
		return true
	})
}

func with(via []string, v string) []string {
	return append(via[:len(via):len(via)], v)
}

func (w *walker) stmt(s *syntax.Stmt, outer []Redirect, via []string) {
	rs := append(outer[:len(outer):len(outer)], w.redirects(s.Redirs)...)
	switch c := s.Cmd.(type) {
	case *syntax.CallExpr:
		if len(c.Args) > 0 {
			w.call(s, c, rs, via)
		}
		for _, a := range c.Assigns {
			w.visit(a, nil, via)
		}
		for _, a := range c.Args {
			w.visit(a, nil, via)
		}
	case *syntax.DeclClause:
		cmd := Command{Text: w.text(c.Pos(), c.End()), Words: []string{c.Variant.Value}, Literal: []bool{true}, Via: via, Redirects: rs}
		for _, a := range c.Args {
			if a.Name != nil {
				cmd.Assigns = append(cmd.Assigns, a.Name.Value)
			}
			w.visit(a, nil, via)
		}
		w.p.out = append(w.p.out, cmd)
	case nil:
	default:
		w.visit(c, rs, via)
	}
	for _, r := range s.Redirs {
		if r.Word != nil {
			w.visit(r.Word, nil, via)
		}
		if r.Hdoc != nil {
			w.visit(r.Hdoc, nil, via)
		}
	}
}

func (w *walker) redirects(rs []*syntax.Redirect) []Redirect {
	var out []Redirect
	for _, r := range rs {
		red := Redirect{Op: r.Op.String()}
		switch r.Op {
		case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.AppClob, syntax.RdrAll, syntax.RdrAllClob, syntax.AppAll, syntax.AppAllClob, syntax.RdrInOut:
			red.Write = true
			red.Target, red.Literal = w.word(r.Word)
		case syntax.RdrIn:
			red.Target, red.Literal = w.word(r.Word)
		case syntax.DplIn, syntax.DplOut:
			// ">&2", "<&0": fd duplication, unless the word is a file name
			// (">& file" is the same as "&> file").
			t, lit := w.word(r.Word)
			if lit && !isFD(t) {
				red.Target, red.Literal, red.Write = t, lit, r.Op == syntax.DplOut
			} else if !lit {
				red.Target, red.Literal, red.Write = t, false, r.Op == syntax.DplOut
			}
		}
		out = append(out, red)
	}
	return out
}

func isFD(s string) bool {
	if s == "-" {
		return true
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// word returns a word's literal value (unquoted) and true, or its source
// text and false when it contains an expansion.
func (w *walker) word(x *syntax.Word) (string, bool) {
	if x == nil {
		return "", false
	}
	var b strings.Builder
	for _, part := range x.Parts {
		switch q := part.(type) {
		case *syntax.Lit:
			b.WriteString(unescape(q.Value, false))
		case *syntax.SglQuoted:
			if q.Dollar && strings.Contains(q.Value, `\`) {
				return w.text(x.Pos(), x.End()), false
			}
			b.WriteString(q.Value)
		case *syntax.DblQuoted:
			if q.Dollar {
				return w.text(x.Pos(), x.End()), false
			}
			for _, dp := range q.Parts {
				lit, ok := dp.(*syntax.Lit)
				if !ok {
					return w.text(x.Pos(), x.End()), false
				}
				b.WriteString(unescape(lit.Value, true))
			}
		default:
			return w.text(x.Pos(), x.End()), false
		}
	}
	return b.String(), true
}

// unescape removes the backslashes bash removes: before any character
// outside quotes, before $ ` " \ and newline inside double quotes; a
// backslash-newline disappears entirely.
func unescape(s string, dq bool) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		n := s[i+1]
		switch {
		case n == '\n':
			i++
		case !dq || strings.IndexByte("$`\"\\", n) >= 0:
			b.WriteByte(n)
			i++
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// call records the simple command c of statement s.
func (w *walker) call(s *syntax.Stmt, c *syntax.CallExpr, rs []Redirect, via []string) {
	end := c.End()
	var hdocs []string
	if s.Cmd == c {
		for _, r := range s.Redirs {
			if r.Word != nil && r.Word.End().After(end) {
				end = r.Word.End()
			}
			if r.Hdoc != nil {
				hdocs = append(hdocs, w.text(r.Hdoc.Pos(), r.Hdoc.End()))
			}
		}
	}
	text := w.text(c.Pos(), end)
	if len(hdocs) > 0 {
		text += "\n" + strings.Join(hdocs, "\n")
	}
	cmd := Command{Text: text, Via: via, Redirects: rs}
	for _, a := range c.Assigns {
		if a.Name != nil {
			cmd.Assigns = append(cmd.Assigns, a.Name.Value)
		}
	}
	for _, a := range c.Args {
		v, lit := w.word(a)
		cmd.Words = append(cmd.Words, v)
		cmd.Literal = append(cmd.Literal, lit)
	}
	var stdin *syntax.Redirect
	if s.Cmd == c {
		for _, r := range s.Redirs {
			switch r.Op {
			case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc, syntax.RdrIn:
				stdin = r
			}
		}
	}
	w.unwrap(cmd, 0, stdin)
}

// unwrap looks through wrappers from word i on and records cmd (and any
// command it nests).
func (w *walker) unwrap(cmd Command, i int, stdin *syntax.Redirect) {
	for i < len(cmd.Words) {
		if !cmd.Literal[i] {
			cmd.Prog, cmd.Dynamic, cmd.Why = i, true, "the program to run is only known at run time: "+cmd.Words[i]
			w.p.out = append(w.p.out, cmd)
			return
		}
		name := path.Base(cmd.Words[i])
		if strings.ContainsAny(cmd.Words[i], "*?[{") {
			cmd.Prog, cmd.Dynamic, cmd.Why = i, true, "the program name is a pattern: "+cmd.Words[i]
			w.p.out = append(w.p.out, cmd)
			return
		}
		next, ok := w.wrapper(&cmd, name, i)
		if !ok {
			break
		}
		if next < 0 {
			return // a nested script was recorded instead
		}
		cmd.Via = with(cmd.Via, name)
		i = next
	}
	cmd.Prog = i
	if i < len(cmd.Words) {
		name := path.Base(cmd.Words[i])
		if isShell(name) {
			if w.shell(&cmd, i, stdin) {
				return
			}
		}
		if name == "find" {
			w.p.out = append(w.p.out, cmd)
			w.findExec(&cmd, i)
			return
		}
	}
	w.p.out = append(w.p.out, cmd)
}

// wrapper handles the wrapper command name at word i of cmd: it returns
// the index of the word the wrapper runs and true; -1 and true when it
// recorded a nested script itself; false when name is not a wrapper.
func (w *walker) wrapper(cmd *Command, name string, i int) (int, bool) {
	words := cmd.Words
	// skip skips options; valued lists options that take a separate
	// value. It stops at the first non-option word or after "--".
	skip := func(j int, valued string) int {
		for j < len(words) && cmd.Literal[j] && strings.HasPrefix(words[j], "-") && words[j] != "-" {
			if words[j] == "--" {
				return j + 1
			}
			if !strings.Contains(words[j], "=") && strings.Contains(" "+valued+" ", " "+words[j]+" ") {
				j++
			}
			j++
		}
		return j
	}
	switch name {
	case "env":
		j := i + 1
		for j < len(words) {
			wd := words[j]
			switch {
			case !cmd.Literal[j]:
				return j, true
			case wd == "-S" || wd == "--split-string" || strings.HasPrefix(wd, "--split-string="):
				script := strings.TrimPrefix(wd, "--split-string=")
				if script == wd {
					if j+1 >= len(words) || !cmd.Literal[j+1] {
						cmd.Prog, cmd.Dynamic, cmd.Why = i, true, "env -S with a command only known at run time"
						w.p.out = append(w.p.out, *cmd)
						return -1, true
					}
					script = words[j+1]
				}
				w.nested(cmd, script, "env -S")
				return -1, true
			case wd == "-u" || wd == "--unset" || wd == "-C" || wd == "--chdir":
				j += 2
			case wd == "--":
				return j + 1, true
			case strings.HasPrefix(wd, "-"):
				j++
			case strings.Contains(wd, "=") && !strings.HasPrefix(wd, "="):
				k, _, _ := strings.Cut(wd, "=")
				cmd.Assigns = append(cmd.Assigns, k)
				j++
			default:
				return j, true
			}
		}
		return j, true
	case "timeout":
		j := skip(i+1, "-s --signal -k --kill-after")
		return j + 1, true // the duration
	case "nice":
		return skip(i+1, "-n --adjustment"), true
	case "ionice":
		return skip(i+1, "-c --class -n --classdata -p --pid -P --pgid -u --uid"), true
	case "stdbuf":
		return skip(i+1, "-i -o -e --input --output --error"), true
	case "nohup", "setsid", "builtin", "time":
		return skip(i+1, "-f --format -o --output"), true
	case "command":
		j := skip(i+1, "")
		for _, wd := range words[i+1 : j] {
			if wd == "-v" || wd == "-V" {
				return 0, false // only looks the name up
			}
		}
		return j, true
	case "exec":
		return skip(i+1, "-a"), true
	case "sudo":
		return skip(i+1, "-u --user -g --group -C --close-from -D --chdir -h --host -p --prompt -r --role -t --type -U --other-user -T --command-timeout"), true
	case "doas":
		return skip(i+1, "-u -C"), true
	case "xargs":
		return skip(i+1, "-I -i -n --max-args -P --max-procs -L --max-lines -d --delimiter -E -e -s --max-chars -a --arg-file"), true
	case "eval":
		rest := words[i+1:]
		for k := range rest {
			if !cmd.Literal[i+1+k] {
				cmd.Prog, cmd.Dynamic, cmd.Why = i, true, "eval of a string only known at run time"
				w.p.out = append(w.p.out, *cmd)
				return -1, true
			}
		}
		w.nested(cmd, strings.Join(rest, " "), "eval")
		return -1, true
	case "trap":
		j := skip(i+1, "")
		if j < len(words) && len(words)-j >= 2 {
			if !cmd.Literal[j] {
				cmd.Prog, cmd.Dynamic, cmd.Why = i, true, "trap of a command only known at run time"
				w.p.out = append(w.p.out, *cmd)
				return -1, true
			}
			w.nested(cmd, words[j], "trap")
			return -1, true
		}
		return 0, false
	case "watch":
		j := skip(i+1, "-n --interval -d --differences -q --equexit")
		if j < len(words) {
			for k := j; k < len(words); k++ {
				if !cmd.Literal[k] {
					cmd.Prog, cmd.Dynamic, cmd.Why = i, true, "watch of a command only known at run time"
					w.p.out = append(w.p.out, *cmd)
					return -1, true
				}
			}
			w.nested(cmd, strings.Join(words[j:], " "), "watch")
			return -1, true
		}
		return 0, false
	case "su":
		for j := i + 1; j+1 < len(words); j++ {
			if words[j] == "-c" || words[j] == "--command" {
				if !cmd.Literal[j+1] {
					cmd.Prog, cmd.Dynamic, cmd.Why = i, true, "su -c with a command only known at run time"
					w.p.out = append(w.p.out, *cmd)
					return -1, true
				}
				w.nested(cmd, words[j+1], "su -c")
				return -1, true
			}
		}
		return 0, false
	}
	return 0, false
}

func isShell(name string) bool {
	switch name {
	case "bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "busybox":
		return true
	}
	return false
}

// shell handles a shell at word i: "bash -c SCRIPT" and a shell reading
// its script from standard input are recorded as their nested commands
// (true); a shell running a script file is an ordinary command (false).
func (w *walker) shell(cmd *Command, i int, stdin *syntax.Redirect) bool {
	words := cmd.Words
	j := i + 1
	if path.Base(words[i]) == "busybox" {
		if j >= len(words) || !isShell(words[j]) {
			return false
		}
		j++
	}
	hasC, fromStdin := false, false
	for j < len(words) && cmd.Literal[j] && (strings.HasPrefix(words[j], "-") || strings.HasPrefix(words[j], "+")) {
		wd := words[j]
		if wd == "--" {
			j++
			break
		}
		if wd == "-o" || wd == "+o" || wd == "-O" || wd == "+O" || wd == "--rcfile" || wd == "--init-file" {
			j += 2
			continue
		}
		if !strings.HasPrefix(wd, "--") {
			hasC = hasC || strings.Contains(wd[1:], "c")
			fromStdin = fromStdin || strings.Contains(wd[1:], "s")
		}
		j++
	}
	name := path.Base(words[i])
	switch {
	case hasC:
		if j >= len(words) {
			return false // "bash -c" with no script: an error in bash
		}
		if !cmd.Literal[j] {
			cmd.Dynamic, cmd.Why = true, name+" -c with a script only known at run time: "+words[j]
			return false
		}
		w.nested(cmd, words[j], name+" -c")
		return true
	case j < len(words) && !fromStdin:
		return false // runs a script file
	}
	// The script comes from standard input.
	if stdin != nil && (stdin.Op == syntax.Hdoc || stdin.Op == syntax.DashHdoc || stdin.Op == syntax.WordHdoc) {
		var body string
		lit := true
		if stdin.Op == syntax.WordHdoc {
			body, lit = w.word(stdin.Word)
		} else if stdin.Hdoc != nil {
			body, lit = w.word(stdin.Hdoc)
			if !lit {
				// An unquoted here-document with expansions: bash expands
				// them first; what runs is only known at run time.
				body = w.text(stdin.Hdoc.Pos(), stdin.Hdoc.End())
			}
		}
		if lit {
			w.nested(cmd, body, name+" <<")
			return true
		}
	}
	cmd.Dynamic, cmd.Why = true, name+" runs a script read from its standard input"
	return false
}

// nested records the commands of script, run by cmd, or cmd as dynamic if
// the script is too deep or does not parse.
func (w *walker) nested(cmd *Command, script, how string) {
	via := with(cmd.Via, how)
	if w.depth+1 > maxNesting {
		cmd.Dynamic, cmd.Why = true, "nested scripts too deep to analyse"
		w.p.out = append(w.p.out, *cmd)
		return
	}
	if err := w.p.parse(script, via, w.depth+1); err != nil {
		cmd.Dynamic, cmd.Why = true, fmt.Sprintf("%s script does not parse: %v", how, err)
		w.p.out = append(w.p.out, *cmd)
	}
}

// findExec records the commands of find's -exec, -execdir, -ok and
// -okdir actions, each up to its ";" or "+". In them, "{}" stands for
// the files found, so it is replaced by find's starting points (what the
// found files lie under) for the analysis.
func (w *walker) findExec(cmd *Command, i int) {
	words := cmd.Words
	var starts []string
	var startLit []bool
	for j := i + 1; j < len(words) && !strings.HasPrefix(words[j], "-") && words[j] != "(" && words[j] != "!"; j++ {
		starts = append(starts, words[j])
		startLit = append(startLit, cmd.Literal[j])
	}
	if len(starts) == 0 {
		starts, startLit = []string{"."}, []bool{true}
	}
	for j := i + 1; j < len(words); j++ {
		switch words[j] {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		k := j + 1
		for k < len(words) && words[k] != ";" && words[k] != "+" {
			k++
		}
		if k > j+1 {
			sub := Command{
				Text:      strings.Join(words[j+1:k], " "),
				Via:       with(cmd.Via, "find "+words[j]),
				Redirects: cmd.Redirects,
			}
			for m := j + 1; m < k; m++ {
				if words[m] == "{}" && cmd.Literal[m] {
					sub.Words = append(sub.Words, starts...)
					sub.Literal = append(sub.Literal, startLit...)
					continue
				}
				sub.Words = append(sub.Words, words[m])
				sub.Literal = append(sub.Literal, cmd.Literal[m])
			}
			w.unwrap(sub, 0, nil)
		}
		j = k
	}
}
