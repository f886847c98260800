package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	mail "github.com/wneessen/go-mail"
)

// Sink sends one message. Send is called from the notifier's own
// goroutine, never from a run's; an error is retried with backoff. It
// must be safe for concurrent use.
type Sink interface {
	Send(ctx context.Context, m *Message) error
}

// Webhook posts each message as JSON signed with the Standard Webhooks
// scheme: webhook-id is the message id (the same on every retry, so a
// receiver drops repeats), and the body is {"type":
// "keel.notification.KIND", "timestamp": ..., "data": MESSAGE}.
type Webhook struct {
	URL string
	// Secret is the signing secret ("whsec_" and base64).
	Secret string
	// Client sends the requests; nil means one with a 30-second timeout.
	Client *http.Client
}

// Send implements [Sink].
func (w *Webhook) Send(ctx context.Context, m *Message) error {
	wh, err := standardwebhooks.NewWebhook(w.Secret)
	if err != nil {
		return fmt.Errorf("notify: webhook secret: %w", err)
	}
	now := time.Now()
	body, err := json.Marshal(map[string]any{"type": "keel.notification." + string(m.Kind), "timestamp": now.UTC().Format(time.RFC3339), "data": m})
	if err != nil {
		return err
	}
	sig, err := wh.Sign(m.ID, now, body)
	if err != nil {
		return err
	}
	h := http.Header{}
	h.Set(standardwebhooks.HeaderWebhookID, m.ID)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return post(ctx, w.Client, w.URL, h, body)
}

// Slack posts each message to a Slack-compatible incoming webhook (Slack,
// Mattermost, Rocket.Chat, ...) as {"text": ...} with the link as a
// link. The URL is the secret: keep it out of the journal (it is only in
// the server's configuration).
type Slack struct {
	URL    string
	Client *http.Client
}

// slackEscape escapes the three characters Slack's text format reserves.
var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Send implements [Sink].
func (s *Slack) Send(ctx context.Context, m *Message) error {
	text := "*" + slackEscape.Replace(m.Title) + "*\n" + slackEscape.Replace(strings.TrimSuffix(m.Text, " Open it: "+m.Link))
	if m.Link != "" {
		text += "\n<" + m.Link + "|Open it in Keel>"
	}
	body, err := json.Marshal(map[string]string{"text": text})
	if err != nil {
		return err
	}
	return post(ctx, s.Client, s.URL, http.Header{}, body)
}

func post(ctx context.Context, c *http.Client, url string, h http.Header, body []byte) error {
	if c == nil {
		c = &http.Client{Timeout: 30 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "keel-notify")
	resp, err := c.Do(req)
	if err != nil {
		// The URL may be a secret (an incoming webhook's): say only
		// what went wrong.
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) {
			err = ue.Unwrap()
		}
		return fmt.Errorf("notify: post: %v", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("notify: the receiver answered %s", resp.Status)
	}
	return nil
}

// Email sends each message as a plain-text email through an SMTP server
// (github.com/wneessen/go-mail), with the message id as its Message-ID.
type Email struct {
	// Addr is the SMTP server's HOST:PORT.
	Addr string
	From string
	To   []string
	// Username and Password, when set, authenticate (PLAIN, or what the
	// server offers).
	Username, Password string
	// TLS is "mandatory" (STARTTLS required, the default), "opportunistic",
	// "none" (a local relay) or "implicit" (TLS from the start, port 465).
	TLS string
	// Domain is the right side of Message-IDs; "" means the From domain.
	Domain string
}

// Send implements [Sink].
func (e *Email) Send(ctx context.Context, m *Message) error {
	host, portText, err := net.SplitHostPort(e.Addr)
	if err != nil {
		return fmt.Errorf("notify: smtp address %q: %w", e.Addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return fmt.Errorf("notify: smtp port %q: %w", portText, err)
	}
	opts := []mail.Option{mail.WithPort(port), mail.WithTimeout(30 * time.Second)}
	switch e.TLS {
	case "", "mandatory":
		opts = append(opts, mail.WithTLSPolicy(mail.TLSMandatory))
	case "opportunistic":
		opts = append(opts, mail.WithTLSPolicy(mail.TLSOpportunistic))
	case "none":
		opts = append(opts, mail.WithTLSPolicy(mail.NoTLS))
	case "implicit":
		opts = append(opts, mail.WithSSL())
	default:
		return fmt.Errorf("notify: unknown smtp tls mode %q", e.TLS)
	}
	if e.Username != "" {
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthAutoDiscover), mail.WithUsername(e.Username), mail.WithPassword(e.Password))
	}
	c, err := mail.NewClient(host, opts...)
	if err != nil {
		return fmt.Errorf("notify: smtp: %w", err)
	}
	msg := mail.NewMsg()
	if err := msg.From(e.From); err != nil {
		return fmt.Errorf("notify: from %q: %w", e.From, err)
	}
	if err := msg.To(e.To...); err != nil {
		return fmt.Errorf("notify: to: %w", err)
	}
	domain := e.Domain
	if domain == "" {
		if _, d, ok := strings.Cut(e.From, "@"); ok {
			domain = strings.TrimSuffix(d, ">")
		}
	}
	msg.SetMessageIDWithValue(m.ID + "@" + domain)
	msg.SetDate()
	msg.Subject(m.Title)
	msg.SetBodyString(mail.TypeTextPlain, m.Text+"\n")
	if err := c.DialAndSendWithContext(ctx, msg); err != nil {
		return fmt.Errorf("notify: smtp send: %w", err)
	}
	return nil
}
