package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"time"

	"github.com/kin-agents/kin/kin"
)

// SessionCookie is the name of the dashboard's session cookie. Its value is
// derived from the operator token (an HMAC of it), so it is as strong as
// the token, never shows the token itself, and stays valid across restarts
// for as long as the token does.
const SessionCookie = "kin_session"

// sessionLifetime is how long a browser keeps the session cookie.
const sessionLifetime = 12 * time.Hour

func sessionValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("kin dashboard session v1"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// CheckToken reports whether tok is the operator token.
func (s *Server) CheckToken(tok string) bool {
	return s.token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.token)) == 1
}

// NewSession returns the session cookie for a browser that presented the
// operator token: HttpOnly (no script reads it), SameSite=Strict (no other
// site's page sends it), Secure when the request came over TLS.
func (s *Server) NewSession(r *http.Request) *http.Cookie {
	return &http.Cookie{
		Name: SessionCookie, Value: s.session, Path: "/",
		MaxAge: int(sessionLifetime / time.Second), HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	}
}

// EndSession returns the cookie that makes a browser forget its session.
func EndSession(r *http.Request) *http.Cookie {
	return &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
}

// Operator reports whether r comes from the operator over TCP: it carries
// the operator token as a bearer token, or the dashboard's session cookie.
// A cookie is refused on a request that changes something when the browser
// says it was sent from another origin (SameSite=Strict already keeps other
// sites' requests from carrying it; this is the second lock). why says what
// is missing or wrong.
func (s *Server) Operator(r *http.Request) (ok bool, why string) {
	if tok, ok := bearerToken(r.Header.Get("Authorization")); ok {
		if s.CheckToken(tok) {
			return true, ""
		}
		return false, "the operator token is wrong"
	}
	if c, err := r.Cookie(SessionCookie); err == nil && s.token != "" {
		if subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.session)) != 1 {
			return false, "the dashboard session is no longer valid: log in again"
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
			return false, "a dashboard session may change things only from the dashboard's own origin"
		}
		return true, ""
	}
	return false, "this API needs the operator token: send Authorization: Bearer <the contents of operator.token in kin's home>"
}

// sameOrigin reports whether a browser request came from a page of this
// server: Sec-Fetch-Site, else Origin, must say so when present.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// Protect lets through only the operator (Operator), answering others with
// 401 and the JSON error every endpoint uses, and another host of the
// fleet on the peer routes (PeerHeader, Server.Peer).
func (s *Server) Protect(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(PeerHeader) != "" {
			s.servePeer(w, r, next)
			return
		}
		if ok, why := s.Operator(r); !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kin"`)
			s.writeError(w, r, kin.Errorf(kin.ECodeUnauthorized, "%s", why))
			return
		}
		next.ServeHTTP(w, r)
	})
}
