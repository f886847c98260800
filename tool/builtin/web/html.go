package web

import (
	"bytes"
	"net/url"
	"strings"
	"unicode"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// htmlText renders an HTML page as plain text for a model: the title as
// a heading, headings with '#', list items with '-', table cells
// separated by '|', links as "text (url)" resolved against base, images
// as their alt text; scripts, styles and other non-content elements are
// dropped, entities decoded and whitespace collapsed (kept in <pre>).
func htmlText(body []byte, base *url.URL) string {
	w := &textWriter{lineStart: true}
	z := html.NewTokenizer(bytes.NewReader(body))
	skip, pre := 0, 0
	var title strings.Builder
	inTitle := false
	type link struct {
		href  string
		start int
	}
	var links []link
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			break
		}
		switch tt {
		case html.TextToken:
			if skip > 0 {
				continue
			}
			text := string(z.Text())
			switch {
			case inTitle:
				title.WriteString(text)
			case pre > 0:
				w.raw(text)
			default:
				w.text(text)
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			attrs := map[string]string{}
			for hasAttr {
				var k, v []byte
				k, v, hasAttr = z.TagAttr()
				attrs[string(k)] = string(v)
			}
			a := atom.Lookup(name)
			switch a {
			case atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Svg, atom.Iframe, atom.Object, atom.Canvas:
				if tt == html.StartTagToken {
					skip++
				}
			case atom.Title:
				inTitle = tt == html.StartTagToken
			case atom.Br:
				w.newline()
			case atom.Hr:
				w.para()
				w.raw("---")
				w.para()
			case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
				w.para()
				w.raw(strings.Repeat("#", int(name[1]-'0')) + " ")
			case atom.P, atom.Ul, atom.Ol, atom.Table, atom.Blockquote, atom.Section, atom.Article, atom.Header, atom.Footer, atom.Nav, atom.Main, atom.Aside, atom.Form, atom.Figure, atom.Dl:
				w.para()
			case atom.Pre:
				w.para()
				pre++
			case atom.Li:
				w.newline()
				w.raw("- ")
			case atom.Div, atom.Tr, atom.Dt, atom.Dd, atom.Figcaption, atom.Caption:
				w.newline()
			case atom.Td, atom.Th:
				if !w.lineStart {
					w.raw(" | ")
				}
			case atom.A:
				links = append(links, link{attrs["href"], w.b.Len()})
			case atom.Img:
				if alt := strings.TrimSpace(attrs["alt"]); alt != "" && skip == 0 {
					w.text("[image: " + alt + "]")
				}
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			switch atom.Lookup(name) {
			case atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Svg, atom.Iframe, atom.Object, atom.Canvas:
				if skip > 0 {
					skip--
				}
			case atom.Title:
				inTitle = false
			case atom.P, atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6, atom.Ul, atom.Ol, atom.Table, atom.Blockquote:
				w.para()
			case atom.Pre:
				if pre > 0 {
					pre--
				}
				w.para()
			case atom.Div, atom.Li, atom.Tr, atom.Dd:
				w.newline()
			case atom.A:
				if len(links) == 0 {
					continue
				}
				l := links[len(links)-1]
				links = links[:len(links)-1]
				text := strings.TrimSpace(w.b.String()[min(l.start, w.b.Len()):])
				if u := resolveLink(base, l.href); u != "" && text != "" && text != u {
					w.raw(" (" + u + ")")
				}
			}
		}
	}
	out := collapseBlank(w.b.String())
	if t := strings.Join(strings.Fields(title.String()), " "); t != "" {
		out = "# " + t + "\n\n" + out
	}
	return out
}

// resolveLink returns href as an absolute http(s) URL, or "" for
// fragments, scripts and other schemes.
func resolveLink(base *url.URL, href string) string {
	href = strings.TrimSpace(href)
	if href == "" || strings.HasPrefix(href, "#") {
		return ""
	}
	u, err := url.Parse(href)
	if err != nil {
		return ""
	}
	if base != nil {
		u = base.ResolveReference(u)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return ""
	}
	return u.String()
}

// textWriter collapses whitespace as a browser does.
type textWriter struct {
	b         strings.Builder
	lineStart bool
	space     bool // a space is pending
}

func (w *textWriter) text(s string) {
	for _, r := range s {
		if unicode.IsSpace(r) {
			w.space = true
			continue
		}
		if w.space && !w.lineStart {
			w.b.WriteByte(' ')
		}
		w.b.WriteRune(r)
		w.space, w.lineStart = false, false
	}
}

func (w *textWriter) raw(s string) {
	if s == "" {
		return
	}
	if w.space && !w.lineStart {
		w.b.WriteByte(' ')
	}
	w.b.WriteString(s)
	w.space = false
	w.lineStart = strings.HasSuffix(s, "\n")
}

func (w *textWriter) newline() {
	if !w.lineStart {
		w.b.WriteByte('\n')
	}
	w.lineStart, w.space = true, false
}

func (w *textWriter) para() {
	w.newline()
	if s := w.b.String(); s != "" && !strings.HasSuffix(s, "\n\n") {
		w.b.WriteByte('\n')
	}
}

// collapseBlank trims trailing spaces and keeps at most one blank line in
// a row.
func collapseBlank(s string) string {
	var b strings.Builder
	blank := 0
	for line := range strings.Lines(s) {
		line = strings.TrimRight(line, " \t\r\n")
		if line == "" {
			blank++
			continue
		}
		if b.Len() > 0 {
			if blank > 0 {
				b.WriteString("\n")
			}
		}
		blank = 0
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}
