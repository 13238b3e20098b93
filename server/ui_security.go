package server

// The dashboard's protections (doc/dashboard.md#security):
//
//   - every page and asset carries a strict Content-Security-Policy: no
//     inline script or style, nothing from another origin, no framing, forms
//     post only to the dashboard itself;
//   - every state-changing request is a POST that must pass two CSRF checks:
//     the double-submit token (the _csrf form field must equal the
//     kairos_csrf cookie, a random value the server sets with SameSite=Strict),
//     here, and the admin door's cross-site check (admin_door.go:
//     Sec-Fetch-Site, Origin, Host), in front of every admin route;
//   - html/template escapes everything the pages show: job bodies,
//     attributes, queue names, error messages.

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

const (
	csrfCookie  = "kairos_csrf"
	csrfField   = "_csrf"
	flashCookie = "kairos_flash"
	// newTokenCookie carries a token just created to the one page that
	// shows it (GET /ui/tokens/created), once.
	newTokenCookie = "kairos_new_token"
	newTokenPath   = "/ui/tokens/created"
	// dashCSP is the dashboard's Content-Security-Policy.
	dashCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

// setDashHeaders sets the security headers of every dashboard response;
// the admin door calls it first thing for every /ui/ request, so that its
// own answers (401, 403) carry them too.
func setDashHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", dashCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// csrfCookie makes sure the browser holds a CSRF token cookie; the pages
// put its value in every form.
func (d *dashboard) csrfCookie(c *gin.Context) {
	if tok, err := c.Cookie(csrfCookie); err == nil && validCSRF(tok) {
		c.Set(csrfCookie, tok)
		c.Next()
		return
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	http.SetCookie(c.Writer, &http.Cookie{Name: csrfCookie, Value: tok, Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.Request.TLS != nil})
	c.Set(csrfCookie, tok)
	c.Next()
}

func validCSRF(tok string) bool {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	return err == nil && len(b) == 32
}

// csrfToken is the request's CSRF token, for the forms of a page.
func csrfToken(c *gin.Context) string { return c.GetString(csrfCookie) }

// checkCSRF refuses a state-changing request that does not come from a
// dashboard page of this server: 403 and nothing done.
func (d *dashboard) checkCSRF(c *gin.Context) {
	refuse := func(why string) {
		d.s.reqLogger(c).WithField("reason", why).Warn("dashboard: request refused (CSRF check)")
		c.Data(http.StatusForbidden, "text/plain; charset=utf-8", []byte("forbidden: "+why+"\n"))
		c.Abort()
	}
	// Sec-Fetch-Site and Origin were checked by the admin door
	// (admin_door.go), for every admin route.
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxAdminBody)
	cookie, err := c.Cookie(csrfCookie)
	form := c.PostForm(csrfField)
	if err != nil || !validCSRF(cookie) || subtle.ConstantTimeCompare([]byte(cookie), []byte(form)) != 1 {
		refuse("missing or wrong CSRF token (reload the page)")
		return
	}
	c.Set(csrfCookie, cookie)
	c.Next()
}

// setFlash leaves a one-shot message for the next page the browser shows.
func setFlash(c *gin.Context, msg string, ok bool) {
	if r := []rune(msg); len(r) > 300 { // a cookie holds 4 KB
		msg = string(r[:300]) + "…"
	}
	prefix := "e"
	if ok {
		prefix = "o"
	}
	http.SetCookie(c.Writer, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(prefix + msg), Path: "/ui/", MaxAge: 60,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.Request.TLS != nil})
}

// takeFlash returns and clears the flash message.
func takeFlash(c *gin.Context) (string, bool) {
	v, err := c.Cookie(flashCookie)
	if err != nil || v == "" {
		return "", false
	}
	http.SetCookie(c.Writer, &http.Cookie{Name: flashCookie, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	if len(v) < 1 {
		return "", false
	}
	return v[1:], v[0] == 'o'
}

// setNewToken leaves the token just created for GET /ui/tokens/created:
// HttpOnly, SameSite=Strict, sent to that path only, for two minutes.
func setNewToken(c *gin.Context, p tokenCreated) {
	if r := []rune(p.Description); len(r) > 200 { // a cookie holds 4 KB
		p.Description = string(r[:200]) + "…"
	}
	b, _ := json.Marshal(p)
	http.SetCookie(c.Writer, &http.Cookie{Name: newTokenCookie, Value: base64.RawURLEncoding.EncodeToString(b), Path: newTokenPath,
		MaxAge: 120, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.Request.TLS != nil})
}

// takeNewToken returns the token left by setNewToken, and clears it.
func takeNewToken(c *gin.Context) (tokenCreated, bool) {
	var p tokenCreated
	v, err := c.Cookie(newTokenCookie)
	if err != nil || v == "" {
		return p, false
	}
	http.SetCookie(c.Writer, &http.Cookie{Name: newTokenCookie, Value: "", Path: newTokenPath, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.Request.TLS != nil})
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || json.Unmarshal(b, &p) != nil || p.Token == "" {
		return tokenCreated{}, false
	}
	return p, true
}

// formatBody renders a job body as text, indented JSON or base64: as asks
// for one ("text", "json", "base64"), "" for the best fit (JSON when it
// parses, text when it is printable UTF-8, else base64). A form that does
// not fit the body falls back to the best fit. It returns the form used.
func formatBody(body []byte, as string) (string, string) {
	isJSON := json.Valid(body) && len(strings.TrimSpace(string(body))) > 0
	isText := utf8.Valid(body) && !strings.ContainsFunc(string(body), func(r rune) bool {
		return r < 0x20 && r != '\n' && r != '\r' && r != '\t'
	})
	switch {
	case as == "json" && isJSON, as == "" && isJSON:
		var out bytes.Buffer
		if json.Indent(&out, bytes.TrimSpace(body), "", "  ") == nil {
			return "json", out.String()
		}
		return "text", string(body)
	case as == "base64":
		return "base64", base64.StdEncoding.EncodeToString(body)
	case isText && as != "json":
		return "text", string(body)
	case as == "" || as == "json" || as == "text":
		if isText {
			return "text", string(body)
		}
	}
	return "base64", base64.StdEncoding.EncodeToString(body)
}
