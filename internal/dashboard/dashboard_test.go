package dashboard_test

import (
	"html"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func get(t testing.TB, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func newRequest(t testing.TB, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// postLogin posts the login form as the browser does.
func postLogin(t testing.TB, base, token string) (*http.Response, string) {
	req := newRequest(t, "POST", base+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return get(t, req)
}

// A request without the operator token, to any path, gets the login page
// (or, for the API, its 401 error) and nothing of the daemon's state.
func TestWithoutTheTokenOnlyTheLoginPage(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	if _, err := d.Client.Register(t.Context(), kin.RegisterRequest{Name: "Secret-Agent-Name", Responsible: "Dr. Schmidt"}); err != nil {
		t.Fatal(err)
	}
	base := "http://" + d.HTTPAddr()
	paths := []string{"/", "/index.html", "/assets/app.js", "/assets/style.css", "/assets/index.html", "/anything", "/v1/agents",
		"/v1/agents/1", "/v1/events?follow=true", "/v1/tree", "/v1/status", "/metrics", "/v1/openapi.json", "/logout"}
	for _, p := range paths {
		for _, method := range []string{"GET", "POST"} {
			resp, body := get(t, newRequest(t, method, base+p, nil))
			if strings.Contains(body, "Secret-Agent-Name") || strings.Contains(body, "Dr. Schmidt") {
				t.Errorf("%s %s without the token shows the registry: %s", method, p, body)
			}
			if resp.StatusCode != http.StatusUnauthorized && !(method == "GET" && p == "/login") {
				if !(resp.StatusCode == http.StatusMethodNotAllowed && strings.HasPrefix(p, "/v1/")) {
					t.Errorf("%s %s without the token: status %d, want 401", method, p, resp.StatusCode)
				}
			}
			api := strings.HasPrefix(p, "/v1/") || p == "/metrics"
			switch {
			case api && resp.StatusCode == http.StatusUnauthorized && !strings.Contains(body, `"code":"unauthorized"`):
				t.Errorf("%s %s without the token: %s, want the API's unauthorized error", method, p, body)
			case !api && !strings.Contains(body, `<form method="post" action="/login">`):
				t.Errorf("%s %s without the token is not the login page: %.200s", method, p, body)
			}
		}
	}
	// The login page's own style sheet is public; it says nothing.
	if resp, _ := get(t, newRequest(t, "GET", base+"/assets/login.css", nil)); resp.StatusCode != http.StatusOK {
		t.Errorf("login.css: %d", resp.StatusCode)
	}
	// A forged cookie is no session.
	req := newRequest(t, "GET", base+"/v1/agents", nil)
	req.AddCookie(&http.Cookie{Name: httpapi.SessionCookie, Value: "forged"})
	if resp, body := get(t, req); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "Secret") {
		t.Errorf("a forged session cookie: %d %s", resp.StatusCode, body)
	}
}

// Logging in sets an HttpOnly, SameSite=Strict cookie that is not the token,
// and with it the page and the same /v1/ API the CLI uses answer.
func TestLoginSetsAStrictCookieForTheSameAPI(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	if _, err := d.Client.Register(t.Context(), kin.RegisterRequest{Name: "Research-Coordinator", Responsible: "Dr. Schmidt"}); err != nil {
		t.Fatal(err)
	}
	base := "http://" + d.HTTPAddr()
	if resp, body := postLogin(t, base, "wrong"); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 || !strings.Contains(body, "not the operator token") {
		t.Fatalf("a wrong token: %d %v %.200s", resp.StatusCode, resp.Cookies(), body)
	}
	resp, _ := postLogin(t, base, d.OperatorToken())
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var c *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == httpapi.SessionCookie {
			c = k
		}
	}
	if c == nil || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.MaxAge <= 0 {
		t.Fatalf("the session cookie: %+v", c)
	}
	if strings.Contains(c.Value, d.OperatorToken()) {
		t.Fatal("the cookie holds the operator token itself")
	}
	withCookie := func(method, path string, body io.Reader) *http.Request {
		req := newRequest(t, method, base+path, body)
		req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		return req
	}
	// The page, and in it only /v1/ paths.
	page, body := get(t, withCookie("GET", "/", nil))
	if page.StatusCode != http.StatusOK || !strings.Contains(body, `<svg id="graph"`) || !strings.Contains(page.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("the dashboard: %d %.200s", page.StatusCode, body)
	}
	_, js := get(t, withCookie("GET", "/assets/app.js", nil))
	calls := regexp.MustCompile("(?:api|fetch)\\(`([^`$]*)").FindAllStringSubmatch(js, -1)
	if len(calls) < 5 {
		t.Fatalf("found only %d API calls in app.js", len(calls))
	}
	for _, m := range calls {
		if !strings.HasPrefix(m[1], "/v1/") {
			t.Errorf("app.js calls %q, not the /v1/ API", m[1])
		}
	}
	for _, p := range []string{"/v1/agents", "/v1/status", "/v1/events", "/metrics"} {
		if resp, body := get(t, withCookie("GET", p, nil)); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the session: %d %.200s", p, resp.StatusCode, body)
		}
	}
	if _, body := get(t, withCookie("GET", "/v1/agents", nil)); !strings.Contains(body, "Research-Coordinator") {
		t.Errorf("GET /v1/agents with the session: %s", body)
	}
	// A change from the dashboard's origin works; from another, it is
	// refused even with the cookie (the browser would not send it there, by
	// SameSite=Strict: this is the second lock).
	suspend := `{"action":"suspend"}`
	req := withCookie("POST", "/v1/agents/1/status", strings.NewReader(suspend))
	req.Header.Set("Origin", "http://evil.example")
	if resp, body := get(t, req); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a cross-origin change with the cookie: %d %s", resp.StatusCode, body)
	}
	if a, _ := d.Client.Agent(t.Context(), 1); a.Status != kin.StatusActive {
		t.Fatalf("the refused request changed the agent: %s", a.Status)
	}
	req = withCookie("POST", "/v1/agents/1/status", strings.NewReader(suspend))
	req.Header.Set("Origin", base)
	if resp, body := get(t, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("a same-origin change with the cookie: %d %s", resp.StatusCode, body)
	}
	// Logging out clears the cookie.
	out, _ := get(t, withCookie("POST", "/logout", nil))
	if out.StatusCode != http.StatusSeeOther || len(out.Cookies()) != 1 || out.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("logout: %d %v", out.StatusCode, out.Cookies())
	}
}

// The login page names where this daemon keeps its token, in its own home,
// not a fixed ~/.kin that may be another daemon's.
func TestLoginNamesTheRealTokenPath(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	_, body := get(t, newRequest(t, "GET", "http://"+d.HTTPAddr()+"/login", nil))
	want := "cat " + html.EscapeString(filepath.Join(d.Home, daemon.TokenName))
	if !strings.Contains(body, want) || strings.Contains(body, "~/.kin") {
		t.Errorf("the login page's hint does not say %q: %s", want, body)
	}
}
