package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	nethtml "golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// conversation renders a run whose task, model message and person's
// message are text, as the run page's conversation shows them.
func conversation(t *testing.T, text string) string {
	t.Helper()
	r := newConvRenderer("r1")
	var b strings.Builder
	for i, ev := range []struct {
		typ journal.Type
		v   any
	}{
		{journal.RunCreated, &agent.RunCreated{Task: text}},
		{journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: text}}},
		{journal.UserMessage, &agent.UserMessage{Content: text}},
	} {
		p, err := json.Marshal(ev.v)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range r.render(&journal.Event{RunID: "r1", Seq: int64(i + 1), Type: ev.typ, Time: time.Unix(1, 0), Payload: p}) {
			b.WriteString(string(it.HTML))
		}
	}
	return b.String()
}

// active lists what in a page fragment could run code: script-like
// elements, event handler attributes, links and sources with a scheme
// that runs or embeds a document.
func active(t *testing.T, fragment string) []string {
	t.Helper()
	nodes, err := nethtml.ParseFragment(strings.NewReader(fragment), &nethtml.Node{Type: nethtml.ElementNode, Data: "div", DataAtom: atom.Div})
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	var walk func(n *nethtml.Node)
	walk = func(n *nethtml.Node) {
		if n.Type == nethtml.ElementNode {
			switch n.Data {
			case "script", "iframe", "frame", "object", "embed", "svg", "math", "style", "link", "meta", "base", "form", "input", "button", "textarea":
				if !(n.Data == "input" && attr(n, "type") == "checkbox" && attr(n, "disabled") != "") { // a task list's box
					found = append(found, "<"+n.Data+">")
				}
			}
			for _, a := range n.Attr {
				k := strings.ToLower(a.Key)
				v := strings.ToLower(strings.Join(strings.Fields(a.Val), ""))
				switch {
				case strings.HasPrefix(k, "on"), k == "style", k == "formaction", k == "srcdoc":
					found = append(found, k+"="+a.Val)
				case (k == "href" || k == "src" || k == "action" || k == "xlink:href") && (strings.HasPrefix(v, "javascript:") || strings.HasPrefix(v, "vbscript:") || strings.HasPrefix(v, "data:text") || strings.HasPrefix(v, "file:")):
					found = append(found, k+"="+a.Val)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
	return found
}

func attr(n *nethtml.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// Answers, messages and the task show as Markdown in the web UI, and no
// script, handler or javascript: link a model (or a prompt injection
// through it) writes can reach the page.
func TestConversationMarkdownIsSafe(t *testing.T) {
	for _, payload := range []string{
		"<script>alert(1)</script>",
		"<img src=x onerror=alert(1)>",
		"<svg onload=alert(1)></svg>",
		"<iframe src=\"https://evil.example\"></iframe>",
		"<details open ontoggle=alert(1)>x</details>",
		"<a href=\"javascript:alert(1)\">x</a>",
		"[click](javascript:alert(1))",
		"[click](JaVaScRiPt:alert(1))",
		"[click]( javascript:alert(1) )",
		"[click](&#106;avascript:alert(1))",
		"[click](java\tscript:alert(1))",
		"![i](javascript:alert(1))",
		"[x](vbscript:msgbox(1))",
		"[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
		"<javascript:alert(1)>",
		"[ref]\n\n[ref]: javascript:alert(1)",
		"<style>body{display:none}</style>",
		"<p style=\"position:fixed\">x</p>",
		"<form action=\"https://evil.example\"><button>go</button></form>",
		"```html\n<script>alert(1)</script>\n```",
		"<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
		"<noscript><p title=\"</noscript><img src=x onerror=alert(1)>\">",
		"\u202e<script>alert(1)</script>",
	} {
		got := conversation(t, payload)
		if bad := active(t, got); len(bad) > 0 {
			t.Errorf("%q renders %q:\n%s", payload, bad, got)
		}
	}
	got := conversation(t, "**bold** and `code <b>`\n\n- one\n- two\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```\nx < y\n```\n\n[docs](https://example.com/docs)")
	for _, want := range []string{"<strong>bold</strong>", "<code>code &lt;b&gt;</code>", "<li>one</li>", "<table>", "<td>1</td>", "<pre><code>x &lt; y\n</code></pre>", `<a href="https://example.com/docs" rel="nofollow noreferrer noopener" target="_blank">docs</a>`} {
		if strings.Count(got, want) != 3 {
			t.Errorf("the task, answer and message do not each render %q:\n%s", want, got)
		}
	}
	if got := conversation(t, "a \u202e b"); !strings.Contains(got, `\u202e`) {
		t.Errorf("a bidirectional override is not shown as an escape:\n%s", got)
	}
}
