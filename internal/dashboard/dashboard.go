// Package dashboard serves kin's web dashboard: a login page, then one page
// that draws the lineage tree live, with an agent panel, the operator's
// actions and the event stream. Every asset is embedded in the binary; the
// page reads and acts through the same /v1/ API as the CLI, authenticated by
// the session cookie the login sets.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/kin-agents/kin/internal/httpapi"
)

//go:embed assets
var assets embed.FS

// Handler serves the dashboard. api checks the operator token and makes the
// session cookie. A request without a valid session gets the login page
// and nothing else; tokenPath is where the page tells the operator to find
// the token.
func Handler(api *httpapi.Server, tokenPath string) http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		loginPage(w, tokenPath, http.StatusOK, "")
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		if err := r.ParseForm(); err != nil {
			loginPage(w, tokenPath, http.StatusBadRequest, "The form could not be read.")
			return
		}
		if !api.CheckToken(r.PostForm.Get("token")) {
			loginPage(w, tokenPath, http.StatusUnauthorized, "That is not the operator token.")
			return
		}
		http.SetCookie(w, api.NewSession(r))
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})
	mux.HandleFunc("POST /logout", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, httpapi.EndSession(r))
		http.Redirect(w, r, "/login", http.StatusSeeOther)
	})
	mux.Handle("GET /{$}", noCache(files))
	mux.Handle("GET /assets/", http.StripPrefix("/assets", noCache(files)))
	mux.HandleFunc("/", api.NotFound)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/login" && r.URL.Path != "/assets/login.css" {
			if ok, _ := api.Operator(r); !ok {
				loginPage(w, tokenPath, http.StatusUnauthorized, "")
				return
			}
		}
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; form-action 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, r)
	})
}

func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}
