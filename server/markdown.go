package server

import (
	"bytes"
	"html/template"
	"sync"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"

	"github.com/keel-run/keel/visible"
)

// The web UI shows what a model or a person wrote (answers, messages,
// the task) as Markdown. The text is untrusted: goldmark renders it
// without its unsafe mode (raw HTML in the text is left out, links
// with a javascript:, vbscript:, file: or data: scheme other than
// images are dropped), and bluemonday's policy for user content then
// keeps only its own list of elements and attributes, so that no script,
// event handler, style or frame the text spells can reach the page.
// Hidden and reordering characters are shown as escapes first
// (visible.String), as everywhere else in the UI.
var (
	markdownOnce = sync.OnceValues(func() (goldmark.Markdown, *bluemonday.Policy) {
		md := goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough, extension.Linkify, extension.TaskList))
		p := bluemonday.UGCPolicy()
		p.RequireNoReferrerOnLinks(true)
		p.AddTargetBlankToFullyQualifiedLinks(true)
		return md, p
	})
)

// markdown renders s as sanitized HTML; on a rendering error, s escaped.
func markdown(s string) template.HTML {
	md, p := markdownOnce()
	s = visible.String(s)
	var b bytes.Buffer
	if err := md.Convert([]byte(s), &b); err != nil {
		return template.HTML(`<p>` + template.HTMLEscapeString(s) + `</p>`)
	}
	return template.HTML(p.SanitizeBytes(b.Bytes()))
}
