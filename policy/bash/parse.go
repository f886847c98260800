package bash

import (
	"fmt"
	"path"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// Command is one simple command that a bash command line would run, as
// found by [Parse].
type Command struct {
	// Text is the command as written: its words and its own redirections,
	// followed by the body of any here-document it reads, then the
	// redirections of the compound commands around it ("touch a > f" for
	// "{ touch a; } > f"). A command that reads its arguments or its
	// script from a pipe (xargs, parallel, a shell or an interpreter
	// reading standard input) has the whole pipeline as its text, and a
	// command run by find -exec the whole find command: the text is what
	// a remembered approval must match exactly.
	Text string
	// Words are the command's words, env-prefix assignments excluded:
	// literal words unquoted ("'a b'" becomes "a b"), any other word as its
	// source text ("$HOME/x" stays "$HOME/x").
	Words []string
	// Literal[i] reports whether Words[i] is a literal: no parameter,
	// command or arithmetic expansion, brace expansion, ANSI-C escape or
	// tilde form other than the home directory ("~", "~/x", "~user") in
	// it.
	Literal []bool
	// Glob[i] is the byte offset in Words[i] of its first unquoted
	// pattern character (*, ? or [), or -1 when it has none: the word is
	// a path pattern whose matches lie under Words[i][:Glob[i]].
	Glob []int
	// Prog is the index in Words of the program that runs, after wrappers
	// such as env, timeout, nice or xargs; len(Words) when there is none
	// (a bare "env").
	Prog int
	// Assigns are the names of env-prefix assignments ("FOO=1 cmd") and
	// of assignments made by env.
	Assigns []string
	// Via lists what the command runs inside, outermost first: "$(...)",
	// "`...`", "<(...)", "bash -c", "eval", "trap", "alias", "env",
	// "timeout", "xargs", "find -exec"....
	Via []string
	// Redirects are the redirections that apply to the command: its own
	// and those of enclosing compound commands.
	Redirects []Redirect
	// Dynamic is set when what runs, or what it works on, is only known
	// at run time: the program name is an expansion, a nested script is
	// not a literal, the arguments come from a pipe (xargs), an alias
	// defined on the line runs, or a word hides commands that bash runs
	// while expanding it (${x@P}, arithmetic on variables, array
	// subscripts); Why says which.
	Dynamic bool
	Why     string
	// Code is set when the command runs code the analysis cannot see: an
	// interpreter or a shell running a script file or a code string
	// (python3 x.py, python3 -c ..., perl -e ..., bash x.sh, source x);
	// CodeWhy says which.
	Code    bool
	CodeWhy string
	// Input is set when the command takes its arguments or its script
	// from a pipe or a file (xargs, a shell reading standard input) or
	// from the files find finds (-exec).
	Input bool
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
	// Pattern reports whether a literal Target has an unquoted pattern
	// character (> AGENT?.md): bash writes the one file it matches.
	Pattern bool
	// Text is the redirection as written ("2>&1", "> out.log").
	Text string
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

// MaxSubstitutionDepth bounds how deep command and process substitutions
// ($(...) inside $(...)) are analysed: a deeper one is a dynamic part of
// its own and is not looked into, so that the analysis stays linear in
// the size of the command line.
const MaxSubstitutionDepth = 16

// Parse parses a bash command line and returns every simple command in
// it, in source order: the commands of pipelines, lists (&&, ||, ;),
// subshells, blocks, loops, conditionals and function bodies; those inside
// command and process substitutions ($(...), `...`, <(...)) and in
// redirection targets and unquoted here-documents; and those of nested
// scripts whose text is a literal: "bash -c SCRIPT" (and sh, dash, zsh,
// ksh), eval, trap, su -c, watch, alias definitions, a shell reading a
// literal here-document, and the command of find -exec. Wrappers (env,
// timeout, nice, nohup, stdbuf, setsid, command, exec, builtin, sudo,
// doas, xargs, parallel, ionice, time, flock, strace...) are looked
// through: [Command.Prog] names what they run. A nested script that is not
// a literal gives a [Command] with Dynamic set, and so do arithmetic
// commands and tests ("(( ))", "let", "[[ -eq ]]") whose operands could
// run commands hidden in variables.
//
// It returns an error when the line does not parse as bash; the runtime
// treats such a line as one dynamic part (the shell would reject it too,
// or the parser does not know a construct, and a person should look).
func Parse(src string) ([]Command, error) {
	cmds, _, _, err := parseLimit(src, 0)
	return cmds, err
}

// parseLimit is [Parse] keeping at most limit commands (0: all); it
// also returns how many there are in all, and why the analysis stopped
// short ("" when it did not: nesting too deep).
func parseLimit(src string, limit int) ([]Command, int, string, error) {
	p := &parser{limit: limit, aliases: map[string]bool{}}
	if err := p.parse(src, nil, 0, 0); err != nil {
		return nil, 0, "", err
	}
	return p.out, p.total, p.short, nil
}

type parser struct {
	out   []Command
	total int
	limit int
	// short says why a part was left unanalysed because of a limit.
	short string
	// aliases are the names defined by alias commands seen so far;
	// aliasUnknown is set once an alias definition was not a literal.
	aliases      map[string]bool
	aliasUnknown bool
}

// record appends cmd, unless the limit is reached (it is still counted).
func (p *parser) record(cmd Command) {
	p.total++
	if p.limit == 0 || len(p.out) < p.limit {
		p.out = append(p.out, cmd)
	}
}

// parsers keeps bash parsers (a few kilobytes of state each) for reuse:
// the gate parses every bash call, and each script nested in one. A
// parser may be reused once its Parse returned; the file it returned
// does not depend on it.
var parsers = sync.Pool{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangBash)) }}

// parseBash parses src as a bash script.
func parseBash(src string) (*syntax.File, error) {
	sp := parsers.Get().(*syntax.Parser)
	defer parsers.Put(sp)
	return sp.Parse(strings.NewReader(src), "")
}

func (p *parser) parse(src string, via []string, depth, subst int) error {
	f, err := parseBash(src)
	if err != nil {
		return fmt.Errorf("policy: parse bash: %w", err)
	}
	w := &walker{p: p, src: src, depth: depth, subst: subst}
	for _, s := range f.Stmts {
		w.stmt(s, nil, via)
	}
	return nil
}

// walker walks one parsed script.
type walker struct {
	p     *parser
	src   string
	depth int // nested scripts around this one
	subst int // substitutions around the current node
	// pipe is the outermost pipeline around the current node, if any.
	pipe *pipeline
}

// pipeline is a pipeline's text and the redirections around it.
type pipeline struct {
	text  string
	outer []Redirect
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
			w.substitution(x, x.Stmts, with(via, v))
			return false
		case *syntax.ProcSubst:
			w.substitution(x, x.Stmts, with(via, "<(...)"))
			return false
		}
		return true
	})
}

// substitution records the commands of a command or process
// substitution, or one dynamic part when it is nested too deep.
func (w *walker) substitution(n syntax.Node, stmts []*syntax.Stmt, via []string) {
	if w.subst >= MaxSubstitutionDepth {
		why := fmt.Sprintf("command substitutions nested more than %d deep are not analysed", MaxSubstitutionDepth)
		w.p.short = why
		w.p.record(Command{Text: w.text(n.Pos(), n.End()), Via: via, Dynamic: true, Why: why})
		return
	}
	pipe := w.pipe
	w.pipe = nil
	w.subst++
	for _, s := range stmts {
		w.stmt(s, nil, via)
	}
	w.subst--
	w.pipe = pipe
}

func with(via []string, v string) []string {
	return append(via[:len(via):len(via)], v)
}

func (w *walker) stmt(s *syntax.Stmt, outer []Redirect, via []string) {
	rs := append(outer[:len(outer):len(outer)], w.redirects(s.Redirs)...)
	switch c := s.Cmd.(type) {
	case *syntax.CallExpr:
		w.call(s, c, outer, rs, via)
		for _, a := range c.Assigns {
			w.visit(a, nil, via)
		}
		for _, a := range c.Args {
			w.visit(a, nil, via)
		}
	case *syntax.DeclClause:
		cmd := Command{Text: withOuter(w.text(c.Pos(), c.End()), outer), Words: []string{c.Variant.Value}, Literal: []bool{true}, Glob: []int{-1}, Via: via, Redirects: rs}
		for _, a := range c.Args {
			if a.Name != nil {
				cmd.Assigns = append(cmd.Assigns, a.Name.Value)
			}
			w.visit(a, nil, via)
		}
		if why := w.declHidden(c); why != "" {
			cmd.Dynamic, cmd.Why = true, why
		}
		w.p.record(cmd)
	case *syntax.BinaryCmd:
		if (c.Op == syntax.Pipe || c.Op == syntax.PipeAll) && w.pipe == nil {
			w.pipe = &pipeline{text: w.text(c.Pos(), c.End()), outer: rs}
			w.visit(c, rs, via)
			w.pipe = nil
		} else {
			w.visit(c, rs, via)
		}
	case *syntax.ArithmCmd, *syntax.LetClause, *syntax.TestClause, *syntax.ForClause:
		if why := compoundHidden(c); why != "" {
			text := w.text(c.Pos(), c.End())
			if f, ok := c.(*syntax.ForClause); ok {
				text = w.text(f.Pos(), f.Loop.End())
			}
			w.p.record(Command{Text: withOuter(text, outer), Via: via, Redirects: rs, Dynamic: true, Why: why})
		}
		w.visit(c, rs, via)
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

// withOuter appends the text of the enclosing redirections to text.
func withOuter(text string, outer []Redirect) string {
	for _, r := range outer {
		if r.Text != "" {
			text += " " + r.Text
		}
	}
	return text
}

func (w *walker) redirects(rs []*syntax.Redirect) []Redirect {
	var out []Redirect
	for _, r := range rs {
		red := Redirect{Op: r.Op.String()}
		end := r.End()
		if r.Hdoc != nil && r.Word != nil {
			end = r.Word.End() // the body is not part of the operator
		}
		red.Text = w.text(r.Pos(), end)
		switch r.Op {
		case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.AppClob, syntax.RdrAll, syntax.RdrAllClob, syntax.AppAll, syntax.AppAllClob, syntax.RdrInOut:
			red.Write = true
			i := w.word(r.Word)
			red.Target, red.Literal, red.Pattern = i.val, i.lit, i.lit && i.glob >= 0
		case syntax.RdrIn:
			red.Target, red.Literal = w.wordValue(r.Word)
		case syntax.DplIn, syntax.DplOut:
			// ">&2", "<&0": fd duplication, unless the word is a file name
			// (">& file" is the same as "&> file").
			t, lit := w.wordValue(r.Word)
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

// wordInfo is what the analysis knows of one word.
type wordInfo struct {
	// val is the literal value (unquoted), or the source text when the
	// word is not a literal.
	val string
	lit bool
	// glob is the offset in val of the first unquoted pattern character,
	// or -1.
	glob int
}

// wordValue returns a word's literal value (unquoted) and true, or its
// source text and false when it is not a literal.
func (w *walker) wordValue(x *syntax.Word) (string, bool) {
	i := w.word(x)
	return i.val, i.lit
}

// word analyses x (see [Command].Literal and Glob).
func (w *walker) word(x *syntax.Word) wordInfo {
	if x == nil {
		return wordInfo{lit: false, glob: -1}
	}
	src := func() wordInfo { return wordInfo{val: w.text(x.Pos(), x.End()), glob: -1} }
	if hasBraces(x) {
		return src()
	}
	var b strings.Builder
	glob := -1
	for i, part := range x.Parts {
		switch q := part.(type) {
		case *syntax.Lit:
			if i == 0 && strings.HasPrefix(q.Value, "~") && !homeTilde(q.Value) {
				return src() // ~+, ~-, ~N: the current, previous or a stacked directory
			}
			v, g := unescapeGlob(q.Value)
			if glob < 0 && g >= 0 {
				glob = b.Len() + g
			}
			b.WriteString(v)
		case *syntax.SglQuoted:
			if q.Dollar && strings.Contains(q.Value, `\`) {
				return src()
			}
			b.WriteString(q.Value)
		case *syntax.DblQuoted:
			if q.Dollar {
				return src()
			}
			for _, dp := range q.Parts {
				lit, ok := dp.(*syntax.Lit)
				if !ok {
					return src()
				}
				b.WriteString(unescape(lit.Value, true))
			}
		default:
			return src()
		}
	}
	return wordInfo{val: b.String(), lit: true, glob: glob}
}

// hasBraces reports whether x has an unquoted brace expansion ("{a,b}",
// "{1..9}").
func hasBraces(x *syntax.Word) bool {
	c := *x
	c.Parts = append([]syntax.WordPart(nil), x.Parts...)
	if !syntax.SplitBraces(&c) {
		return false
	}
	found := false
	syntax.Walk(&c, func(n syntax.Node) bool {
		if b, ok := n.(*syntax.BraceExp); ok && (b.Sequence || len(b.Elems) > 1) {
			found = true
		}
		return !found
	})
	return found
}

// homeTilde reports whether a word starting with "~" names a home
// directory: "~", "~/..." or "~user/...", not "~+", "~-" or "~N".
func homeTilde(s string) bool {
	prefix, _, _ := strings.Cut(s[1:], "/")
	if prefix == "" {
		return true
	}
	c := prefix[0]
	return c != '+' && c != '-' && (c < '0' || c > '9')
}

// unescape removes the backslashes bash removes: before any character
// outside quotes, before $ ` " \ and newline inside double quotes; a
// backslash-newline disappears entirely.
func unescape(s string, dq bool) string {
	v, _ := unescapeMode(s, dq)
	return v
}

// unescapeGlob unescapes an unquoted literal and returns the offset in
// the result of its first unescaped pattern character (*, ? or [), or
// -1.
func unescapeGlob(s string) (string, int) { return unescapeMode(s, false) }

func unescapeMode(s string, dq bool) (string, int) {
	glob := -1
	if !strings.ContainsAny(s, `\*?[`) {
		return s, glob
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !dq && glob < 0 && (c == '*' || c == '?' || c == '[' && strings.IndexByte(s[i+1:], ']') >= 0) {
			glob = b.Len()
		}
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
	return b.String(), glob
}

// call records the simple command c of statement s; outer are the
// redirections of the compound commands around s, rs all of its
// redirections.
func (w *walker) call(s *syntax.Stmt, c *syntax.CallExpr, outer, rs []Redirect, via []string) {
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
	cmd := Command{Text: withOuter(text, outer), Via: via, Redirects: rs}
	for _, a := range c.Assigns {
		if a.Name != nil {
			cmd.Assigns = append(cmd.Assigns, a.Name.Value)
		}
	}
	for _, a := range c.Args {
		wi := w.word(a)
		cmd.Words = append(cmd.Words, wi.val)
		cmd.Literal = append(cmd.Literal, wi.lit)
		cmd.Glob = append(cmd.Glob, wi.glob)
	}
	why := ""
	for _, a := range c.Assigns {
		if why == "" {
			why = assignHidden(a)
		}
	}
	for _, a := range c.Args {
		if why == "" {
			why = hidden(a)
		}
	}
	for _, r := range s.Redirs {
		if why == "" && r.Word != nil {
			why = hidden(r.Word)
		}
	}
	if why != "" {
		cmd.Dynamic, cmd.Why = true, why
	}
	if len(c.Args) == 0 {
		if cmd.Dynamic {
			w.p.record(cmd) // a bare assignment that runs hidden commands
		}
		return
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

// fromInput marks cmd as taking its arguments or its script from its
// standard input: what runs depends on whatever feeds it, so its text
// becomes the whole pipeline around it.
func (w *walker) fromInput(cmd *Command, why string) {
	cmd.Input = true
	if !cmd.Dynamic {
		cmd.Dynamic, cmd.Why = true, why
	}
	if w.pipe != nil {
		cmd.Text = withOuter(w.pipe.text, w.pipe.outer)
	}
}

// unwrap looks through wrappers from word i on and records cmd (and any
// command it nests). A program fed arguments read from standard input by
// a wrapper on the way (xargs, parallel) is dynamic.
func (w *walker) unwrap(cmd Command, i int, stdin *syntax.Redirect) {
	feeder := "" // the wrapper feeding the program arguments from its input
	for i < len(cmd.Words) {
		if !cmd.Literal[i] {
			cmd.Prog, cmd.Dynamic, cmd.Why = i, true, "the program to run is only known at run time: "+cmd.Words[i]
			w.p.record(cmd)
			return
		}
		name := path.Base(cmd.Words[i])
		if cmd.Glob[i] >= 0 || strings.ContainsAny(cmd.Words[i], "*?") {
			cmd.Prog, cmd.Dynamic, cmd.Why = i, true, "the program name is a pattern: "+cmd.Words[i]
			w.p.record(cmd)
			return
		}
		if w.p.aliasUnknown || w.p.aliases[cmd.Words[i]] {
			cmd.Prog, cmd.Dynamic, cmd.Why = i, true, "runs "+cmd.Words[i]+", which may be an alias defined on this command line"
			w.p.record(cmd)
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
		if name == "xargs" || name == "parallel" {
			feeder = name
		}
		i = next
	}
	cmd.Prog = i
	if i >= len(cmd.Words) {
		w.p.record(cmd)
		return
	}
	name := path.Base(cmd.Words[i])
	if feeder != "" {
		w.fromInput(&cmd, fmt.Sprintf("%s runs %s with arguments read from its input", feeder, name))
	}
	switch {
	case isShell(name):
		if w.shell(&cmd, i, stdin) {
			return
		}
	case name == "find":
		w.p.record(cmd)
		w.findExec(&cmd, i)
		return
	case name == "alias":
		w.alias(&cmd, i)
		return
	case name == "hash" || name == "enable":
		w.rebind(&cmd, name, i)
	case name == "source" || name == ".":
		if i+1 < len(cmd.Words) {
			cmd.Code, cmd.CodeWhy = true, name+" runs the script "+cmd.Words[i+1]+" in this shell"
		}
	default:
		w.interpreter(&cmd, i, stdin)
	}
	w.p.record(cmd)
}
