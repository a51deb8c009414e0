package dashboard

import (
	"html/template"
	"net/http"
)

// The login page (and its style sheet) is all anyone without the operator
// token may see; it says nothing of the daemon's state.
var loginTmpl = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>kin: log in</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/assets/login.css">
</head><body>
<main class="login">
<h1>kin</h1>
<p>The lineage of your agents. Paste the operator token to open the dashboard.</p>
<form method="post" action="/login">
<label for="token">Operator token</label>
<input id="token" name="token" type="password" autocomplete="current-password" autofocus required>
<button type="submit">Log in</button>
</form>
{{if .Msg}}<p class="error" role="alert">{{.Msg}}</p>{{end}}
<p class="hint">The token is in kin's home: <code>cat {{.TokenPath}}</code>.
The browser keeps a session cookie; the token itself is not stored.</p>
</main></body></html>
`))

// loginData is what the login page shows: why the last attempt failed,
// and where this daemon keeps its token (its home, whatever that is).
type loginData struct{ Msg, TokenPath string }

func loginPage(w http.ResponseWriter, tokenPath string, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src data:; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	loginTmpl.Execute(w, loginData{Msg: msg, TokenPath: tokenPath})
}
