package server

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/server/token"
)

// logins holds the one-time sign-in codes of the web UI: a code stands for
// a token's secret for a short while, so that a sign-in link never carries
// the secret itself (a link stays in the browser's history).
type logins struct {
	mu    sync.Mutex
	codes map[string]loginCode
	// sessions are the web UI's sessions: session id → the token's
	// secret, until it expires. Only the id is in the browser's cookie.
	sessions map[string]loginCode
}

type loginCode struct {
	secret  string
	expires time.Time
}

// LoginCode returns a one-time code that signs a browser in with the API
// token secret: the link /ui/login?code=CODE shows who it signs in as and
// a button, and pressing it (a same-site POST) exchanges the code for the
// session cookie. The code is valid once, for [Options.LoginCodeTTL]
// (default 15 minutes), and only in this process. It returns an error
// wrapping [token.ErrBad] if secret is not a valid token.
func (h *Handler) LoginCode(ctx context.Context, secret string) (string, error) {
	if _, err := h.tokens.Authenticate(ctx, secret); err != nil {
		return "", err
	}
	code, err := token.Random(20)
	if err != nil {
		return "", err
	}
	now := h.svc.Clock()()
	h.logins.mu.Lock()
	defer h.logins.mu.Unlock()
	for c, l := range h.logins.codes {
		if now.After(l.expires) {
			delete(h.logins.codes, c)
		}
	}
	h.logins.codes[code] = loginCode{secret: secret, expires: now.Add(h.opts.LoginCodeTTL)}
	return code, nil
}

// Session signs a browser in with the API token secret: it returns the
// session cookie to set, whose value is a random session id that stands
// for the token in this process until [Options.SessionTTL] passes (12
// hours by default), the person signs out, or the token is revoked. The
// token itself never reaches the browser's cookie jar; a restart of the
// server ends every session. It returns an error wrapping [token.ErrBad]
// if secret is not a valid token.
func (h *Handler) Session(ctx context.Context, secret string) (*http.Cookie, error) {
	if _, err := h.tokens.Authenticate(ctx, secret); err != nil {
		return nil, err
	}
	id, err := token.Random(32)
	if err != nil {
		return nil, err
	}
	now := h.svc.Clock()()
	h.logins.mu.Lock()
	for s, l := range h.logins.sessions {
		if now.After(l.expires) {
			delete(h.logins.sessions, s)
		}
	}
	h.logins.sessions[id] = loginCode{secret: secret, expires: now.Add(h.opts.SessionTTL)}
	h.logins.mu.Unlock()
	return &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		MaxAge: int(h.opts.SessionTTL / time.Second)}, nil
}

// sessionSecret returns the token secret of session id, if it is live.
func (h *Handler) sessionSecret(id string) (string, bool) {
	h.logins.mu.Lock()
	defer h.logins.mu.Unlock()
	l, ok := h.logins.sessions[id]
	if !ok || h.svc.Clock()().After(l.expires) {
		delete(h.logins.sessions, id)
		return "", false
	}
	return l.secret, true
}

// loginSecret returns the secret a sign-in code stands for; take also
// uses the code up.
func (h *Handler) loginSecret(code string, take bool) (string, bool) {
	h.logins.mu.Lock()
	defer h.logins.mu.Unlock()
	l, ok := h.logins.codes[code]
	if !ok || h.svc.Clock()().After(l.expires) {
		delete(h.logins.codes, code)
		return "", false
	}
	if take {
		delete(h.logins.codes, code)
	}
	return l.secret, true
}

// uiLogin serves the sign-in page. A GET shows the form to paste a token,
// or, with ?code= from a sign-in link, whom the code signs in as and a
// button: nothing changes until the person presses it, so a page on
// another site that sends the browser to a sign-in link cannot replace
// their session. A POST (from this site only) takes the pasted token or
// the code, checks it, and starts a session (Handler.Session: an
// HttpOnly, SameSite=Strict cookie with a random id, never the token).
// Tokens in links (?token=) are refused: they would stay in the browser's
// history.
func (h *Handler) uiLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer")
	ctx := r.Context()
	p := h.newPage(ctx, nil, "Sign in", "")
	p.NextPage = nextPage(r.URL.Query().Get("next"))
	if c, err := r.Cookie(cookieName); err == nil {
		if secret, ok := h.sessionSecret(c.Value); ok {
			if cur, err := h.tokens.Authenticate(ctx, secret); err == nil {
				p.Current = cur.Name
			}
		}
	}
	if r.Method == http.MethodGet {
		q := r.URL.Query()
		switch {
		case q.Has("token"):
			p.Flash = &flash{"bad", "Tokens are not accepted in links (a link stays in the browser's history). Paste the token below, or use a sign-in link with a one-time code."}
		case q.Get("code") != "":
			secret, ok := h.loginSecret(q.Get("code"), false)
			if !ok {
				p.Flash = &flash{"bad", "This sign-in link has expired or was used already. Paste a token below."}
				break
			}
			tok, err := h.tokens.Authenticate(ctx, secret)
			if err != nil {
				p.Flash = &flash{"bad", "The token of this sign-in link is no longer valid."}
				break
			}
			p.Code, p.CodeFor = q.Get("code"), tok
		}
		h.render(w, http.StatusOK, "login", p)
		return
	}
	if !sameOrigin(r) {
		http.Error(w, "cross-site request refused", http.StatusForbidden)
		return
	}
	secret := strings.TrimSpace(r.PostFormValue("token"))
	if code := r.PostFormValue("code"); code != "" {
		s, ok := h.loginSecret(code, true)
		if !ok {
			p.Flash = &flash{"bad", "This sign-in link has expired or was used already. Paste a token below."}
			h.render(w, http.StatusUnauthorized, "login", p)
			return
		}
		secret = s
	}
	if secret == "" {
		h.render(w, http.StatusOK, "login", p)
		return
	}
	cookie, err := h.Session(ctx, secret)
	if err != nil {
		p.Flash = &flash{"bad", "That token is not valid (unknown or revoked)."}
		h.render(w, http.StatusUnauthorized, "login", p)
		return
	}
	if c, err := r.Cookie(cookieName); err == nil {
		h.endSession(c.Value) // the session this one replaces
	}
	cookie.Secure = r.TLS != nil
	http.SetCookie(w, cookie)
	http.Redirect(w, r, nextPage(r.PostFormValue("next")), http.StatusSeeOther)
}

// nextPage returns where to go after signing in: a page of the web UI, or
// the runs list.
func nextPage(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/runs"
	}
	return next
}

func (h *Handler) uiLogout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "cross-site request refused", http.StatusForbidden)
		return
	}
	if c, err := r.Cookie(cookieName); err == nil {
		h.endSession(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// endSession ends session id (sign-out, or a new sign-in in its place).
func (h *Handler) endSession(id string) {
	h.logins.mu.Lock()
	defer h.logins.mu.Unlock()
	delete(h.logins.sessions, id)
}
