package storeopen

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"path/filepath"
	"regexp"
	"strings"
)

// Drivers a DSN can name.
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"
)

// DSN is a parsed store DSN.
type DSN struct {
	Driver string // DriverSQLite or DriverPostgres
	Path   string // SQLite: the database file
	URL    string // PostgreSQL: the connection URL as given (it may hold a password)
}

// String is the DSN in its canonical form, with no secrets.
func (d DSN) String() string {
	switch {
	case d.Driver == DriverSQLite && strings.HasPrefix(d.Path, "//"):
		return "sqlite://" + d.Path // sqlite://PATH drops one leading //
	case d.Driver == DriverSQLite:
		return "sqlite:" + d.Path
	case d.Driver == DriverPostgres:
		return Redact(d.URL)
	}
	return d.Driver + ":"
}

// ParseDSN parses a store DSN:
//
//	"" or "sqlite"   SQLite in <home>/kin.db
//	sqlite:PATH      SQLite in the file PATH
//	sqlite://PATH    the same (sqlite:///abs/kin.db is /abs/kin.db)
//	postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMS]
//	postgresql://... the same; a Unix socket as ?host=/DIR (libpq's URL
//	                 form, as pgx reads it; sslmode, passfile, ... too)
//
// Errors quote the DSN with any password or other secret replaced by ***,
// and say what to write instead.
func ParseDSN(dsn, home string) (DSN, error) {
	bad := func(format string, args ...any) (DSN, error) {
		return DSN{}, fmt.Errorf("store %q: "+format, append([]any{Redact(dsn)}, args...)...)
	}
	if dsn == "" || dsn == DriverSQLite {
		if home == "" {
			return bad("no home to put kin.db in: name the file (sqlite:PATH)")
		}
		return DSN{Driver: DriverSQLite, Path: filepath.Join(home, "kin.db")}, nil
	}
	scheme, rest, ok := cutScheme(dsn)
	if !ok {
		return bad("no scheme: write sqlite:%s for a SQLite file, or sqlite for <home>/kin.db", Redact(dsn))
	}
	switch strings.ToLower(scheme) {
	case "sqlite":
		if scheme != "sqlite" {
			return bad("write the scheme as sqlite, in lower case")
		}
		path := strings.TrimPrefix(rest, "//")
		switch {
		case path == "":
			return bad("name the database file: sqlite:PATH")
		case strings.IndexByte(path, 0) >= 0:
			return bad("the path holds a NUL byte")
		}
		return DSN{Driver: DriverSQLite, Path: path}, nil
	case "postgres", "postgresql":
		if !strings.HasPrefix(rest, "//") {
			return bad("write a PostgreSQL URL as %s://USER@HOST/DATABASE (or ?host=/SOCKET/DIR)", scheme)
		}
		if _, err := pgx.ParseConfig(dsn); err != nil {
			// pgx quotes what it could not read, which may be part of a
			// password: its words are shown only when the URL has no
			// user information.
			why := ""
			if at := strings.LastIndex(rest, "@"); at < 0 {
				why = " (" + Redact(err.Error()) + ")"
			}
			return bad("not a PostgreSQL URL pgx can read%s: write %s://USER@HOST:PORT/DATABASE", why, scheme)
		}
		return DSN{Driver: DriverPostgres, URL: dsn}, nil
	}
	return bad("unknown scheme %q: use sqlite:PATH (or sqlite for <home>/kin.db), or postgres://USER@HOST/DATABASE", Redact(scheme))
}

// IsDSN reports whether s starts with a scheme ParseDSN knows (sqlite:,
// postgres:, postgresql:): for flags that take a file or a DSN.
func IsDSN(s string) bool {
	scheme, _, ok := cutScheme(s)
	switch scheme {
	case "sqlite", "postgres", "postgresql":
		return ok
	}
	return false
}

// schemeRE is RFC 3986's scheme.
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.\-]*$`)

// cutScheme splits "scheme:rest".
func cutScheme(dsn string) (scheme, rest string, ok bool) {
	scheme, rest, ok = strings.Cut(dsn, ":")
	if !ok || !schemeRE.MatchString(scheme) {
		return "", dsn, false
	}
	return scheme, rest, true
}

// secretRE matches the values of keys that hold secrets in a URL's query
// or a key=value connection string.
var secretRE = regexp.MustCompile(`(?i)((?:ssl)?password|passwd|pwd|passfile|secret|token|api[_-]?key)(\s*=\s*)('[^']*'?|[^&\s]*)`)

// Redact hides what a DSN may hold that must not reach a log or an error:
// the user information of a URL (everything before its last @ after the
// scheme's //), and the values of password-like keys.
func Redact(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		if at := strings.LastIndex(dsn[i+3:], "@"); at >= 0 {
			dsn = dsn[:i+3] + "***" + dsn[i+3+at:]
		}
	}
	return secretRE.ReplaceAllString(dsn, "${1}${2}***")
}
