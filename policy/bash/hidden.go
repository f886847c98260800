package bash

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Hidden commands. Bash runs commands while it expands some words: an
// arithmetic expression evaluates a variable's value as an expression,
// and "a[$(cmd)]" in that value runs cmd ($((x)), ((x)), let x, [[ x -eq
// 1 ]], ${a[x]}, ${s:x}, a[x]=1); ${x@P} expands a value as a prompt,
// running its $(...); ${!x} expands the variable named by x's value,
// which may be such a subscript; and builtins that assign to a variable
// named by an argument (declare, printf -v, read, unset...) evaluate its
// subscript. The command line alone cannot show what those values hold,
// so a part containing one is dynamic.

const (
	whyArith     = "arithmetic on a variable can run commands hidden in its value (a[$(cmd)])"
	whyPrompt    = "${x@P} runs the commands in the variable's value"
	whyIndirect  = "an indirect expansion (${!x}) can run commands hidden in the variable's value"
	whySubscript = "an array subscript that is not a number is evaluated as arithmetic and can run commands"
	whyName      = "a variable name with a subscript, or only known at run time, can run commands"
)

// hidden returns why word x can run commands hidden in variable values,
// or "". It does not look into command substitutions (their commands are
// parts of their own).
func hidden(x syntax.Node) string {
	why := ""
	syntax.Walk(x, func(n syntax.Node) bool {
		if why != "" {
			return false
		}
		switch p := n.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst:
			return false
		case *syntax.ArithmExp:
			if !arithLiteral(p.X) {
				why = whyArith
			}
			return false
		case *syntax.ParamExp:
			switch {
			case p.Exp != nil && p.Exp.Op == syntax.OtherParamOps && p.Exp.Word != nil && p.Exp.Word.Lit() != "" && strings.ContainsAny(p.Exp.Word.Lit(), "P"):
				why = whyPrompt
			case p.Excl && p.Names == 0 && !allIndex(p.Index):
				why = whyIndirect
			case p.Index != nil && !allIndex(p.Index) && !arithLiteral(p.Index):
				why = whySubscript
			case p.Slice != nil && (!arithLiteral(p.Slice.Offset) || !arithLiteral(p.Slice.Length)):
				why = whyArith
			}
		}
		return true
	})
	return why
}

// allIndex reports whether a subscript is "@" or "*" (all elements).
func allIndex(e syntax.ArithmExpr) bool {
	w, ok := e.(*syntax.Word)
	return ok && (w.Lit() == "@" || w.Lit() == "*")
}

// arithLiteral reports whether an arithmetic expression uses numbers only
// (no variable, no expansion); nil counts as literal.
func arithLiteral(e syntax.ArithmExpr) bool {
	switch x := e.(type) {
	case nil:
		return true
	case *syntax.BinaryArithm:
		return arithLiteral(x.X) && arithLiteral(x.Y)
	case *syntax.UnaryArithm:
		return arithLiteral(x.X)
	case *syntax.ParenArithm:
		return arithLiteral(x.X)
	case *syntax.Word:
		return isNumber(x.Lit())
	}
	return false
}

// isNumber reports whether s is a bash integer constant: decimal, 0x
// hexadecimal, octal or BASE#DIGITS.
func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		ok := r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '#' || r == '@' || r == '_'
		if !ok {
			return false
		}
	}
	if s[0] < '0' || s[0] > '9' {
		return false
	}
	// Digits first, so it is a constant, not a name; letters only as
	// hexadecimal or BASE# digits.
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") || strings.Contains(s, "#") {
		return true
	}
	return strings.Trim(s, "0123456789") == ""
}

// assignHidden returns why an assignment can run hidden commands: a
// subscript that is not a number, or a hidden expansion in its value.
func assignHidden(a *syntax.Assign) string {
	if a.Index != nil && !arithLiteral(a.Index) {
		return whySubscript
	}
	if a.Value != nil {
		if why := hidden(a.Value); why != "" {
			return why
		}
	}
	if a.Array != nil {
		for _, el := range a.Array.Elems {
			if el.Index != nil && !arithLiteral(el.Index) {
				return whySubscript
			}
			if el.Value != nil {
				if why := hidden(el.Value); why != "" {
					return why
				}
			}
		}
	}
	return ""
}

// declHidden returns why a declare, local, export, readonly or typeset
// can run hidden commands: a name only known at run time or with a
// subscript, a name reference (-n), or a hidden expansion in a value.
func (w *walker) declHidden(c *syntax.DeclClause) string {
	for _, a := range c.Args {
		if a.Naked && a.Name == nil && a.Value != nil {
			v, lit := w.wordValue(a.Value)
			switch {
			case !lit:
				return whyName
			case strings.HasPrefix(v, "-") || strings.HasPrefix(v, "+"):
				if strings.Contains(v, "n") {
					return "a name reference (declare -n) can run commands hidden in the name it refers to"
				}
			case !nameOK(v):
				return whyName
			}
			continue
		}
		if why := assignHidden(a); why != "" {
			return why
		}
	}
	return ""
}

// nameOK reports whether a variable-name argument ("x", "x=v", "a[3]=v")
// is safe: no subscript other than a number.
func nameOK(arg string) bool {
	name, _, _ := strings.Cut(arg, "=")
	name = strings.TrimSuffix(name, "+")
	i := strings.IndexByte(name, '[')
	if i < 0 {
		return true
	}
	sub := strings.TrimSuffix(name[i+1:], "]")
	return isNumber(sub) || sub == "@" || sub == "*"
}

// compoundHidden returns why an arithmetic command, a let, a [[ ]] test
// or a C-style for loop can run hidden commands, or "".
func compoundHidden(c syntax.Command) string {
	switch x := c.(type) {
	case *syntax.ArithmCmd:
		if !arithLiteral(x.X) {
			return whyArith
		}
	case *syntax.LetClause:
		for _, e := range x.Exprs {
			if !arithLiteral(e) {
				return whyArith
			}
		}
	case *syntax.ForClause:
		if l, ok := x.Loop.(*syntax.CStyleLoop); ok {
			if !arithLiteral(l.Init) || !arithLiteral(l.Cond) || !arithLiteral(l.Post) {
				return whyArith
			}
		}
	case *syntax.TestClause:
		return testHidden(x.X)
	}
	return ""
}

// testHidden returns why a [[ ]] expression can run hidden commands:
// arithmetic comparisons (-eq, -lt...) evaluate their operands as
// arithmetic, and -v evaluates a subscript.
func testHidden(e syntax.TestExpr) string {
	switch x := e.(type) {
	case *syntax.BinaryTest:
		switch x.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
			for _, o := range []syntax.TestExpr{x.X, x.Y} {
				if w, ok := o.(*syntax.Word); !ok || !isNumber(w.Lit()) {
					return whyArith
				}
			}
			return ""
		}
		if why := testHidden(x.X); why != "" {
			return why
		}
		return testHidden(x.Y)
	case *syntax.UnaryTest:
		if x.Op == syntax.TsVarSet {
			if w, ok := x.X.(*syntax.Word); !ok || w.Lit() == "" || !nameOK(w.Lit()) {
				return whyName
			}
			return ""
		}
		return testHidden(x.X)
	case *syntax.ParenTest:
		return testHidden(x.X)
	case *syntax.Word:
		return hidden(x)
	}
	return ""
}

// nameArgs returns the arguments of a builtin that name variables to
// assign or test (printf -v NAME, read NAMES, mapfile NAME, unset NAMES,
// getopts OPTS NAME, wait -p NAME, declare NAMES, test -v NAME, let
// EXPRS), as indices into args.
func nameArgs(name string, args []string) []int {
	var out []int
	positional := func(valued string) []int {
		var ps []int
		for i := 0; i < len(args); i++ {
			a := args[i]
			if strings.HasPrefix(a, "-") && len(a) > 1 {
				if strings.Contains(" "+valued+" ", " "+a+" ") {
					i++
				}
				continue
			}
			ps = append(ps, i)
		}
		return ps
	}
	switch name {
	case "printf":
		for i, a := range args {
			if a == "-v" && i+1 < len(args) {
				out = append(out, i+1)
			}
		}
	case "read":
		for i, a := range args {
			if a == "-a" && i+1 < len(args) {
				out = append(out, i+1)
			}
		}
		out = append(out, positional("-a -d -i -n -N -p -t -u")...)
	case "mapfile", "readarray":
		if ps := positional("-d -n -O -s -u -C -c"); len(ps) > 0 {
			out = append(out, ps[len(ps)-1])
		}
	case "unset", "declare", "typeset", "local", "export", "readonly", "let":
		out = positional("")
	case "getopts":
		if ps := positional(""); len(ps) >= 2 {
			out = append(out, ps[1])
		}
	case "wait":
		for i, a := range args {
			if a == "-p" && i+1 < len(args) {
				out = append(out, i+1)
			}
		}
	case "test", "[":
		for i, a := range args {
			if a == "-v" && i+1 < len(args) {
				out = append(out, i+1)
			}
		}
	}
	return out
}

// namesHidden returns why a command's variable-name arguments can run
// hidden commands, or "".
func namesHidden(c *Command) string {
	name := c.Name()
	args := c.Args()
	lits := c.Literal[min(c.Prog+1, len(c.Literal)):]
	for _, i := range nameArgs(name, args) {
		switch {
		case !lits[i]:
			return whyName
		case name == "let":
			if !isNumber(args[i]) {
				return whyArith
			}
		case name == "declare" || name == "typeset" || name == "local":
			if !nameOK(args[i]) {
				return whyName
			}
		case !nameOK(args[i]):
			return whyName
		}
	}
	if name == "declare" || name == "typeset" || name == "local" {
		for _, a := range args {
			if strings.HasPrefix(a, "-") && strings.Contains(a, "n") {
				return "a name reference (declare -n) can run commands hidden in the name it refers to"
			}
		}
	}
	return ""
}
