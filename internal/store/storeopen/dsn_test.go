package storeopen

import (
	"strings"
	"testing"
)

func TestParseDSN(t *testing.T) {
	for _, tt := range []struct {
		dsn, path string
		err       []string // substrings of the error; nil: no error
	}{
		{"", "/home/kin.db", nil},
		{"sqlite", "/home/kin.db", nil},
		{"sqlite:/data/kin.db", "/data/kin.db", nil},
		{"sqlite:rel/kin.db", "rel/kin.db", nil},
		{"sqlite:///data/kin.db", "/data/kin.db", nil},
		{"sqlite://rel/kin.db", "rel/kin.db", nil},
		{"sqlite:/a b/k?x#y%41.db", "/a b/k?x#y%41.db", nil}, // the driver escapes it
		{"sqlite:", "", []string{`store "sqlite:"`, "name the database file: sqlite:PATH"}},
		{"sqlite://", "", []string{"name the database file"}},
		{"sqlite:/a\x00b", "", []string{"NUL"}},
		{"SQLite:/x", "", []string{"lower case"}},
		{"/data/kin.db", "", []string{"no scheme", "sqlite:/data/kin.db"}},
		{"kin.db", "", []string{"no scheme", "sqlite:kin.db"}},
		{"mysql://root:hunter2@db/kin", "", []string{`unknown scheme "mysql"`, "use sqlite:PATH", "mysql://***@db/kin"}},
		{"postgres://kin:hunter2@db.example:notaport/kin", "", []string{"not a PostgreSQL URL", "postgres://***@db.example:notaport/kin", "postgres://USER@HOST:PORT/DATABASE"}},
		{"postgresql://db/kin?password=hunter2&user=kin&sslmode=sometimes", "", []string{"not a PostgreSQL URL", "password=***&user=kin"}},
		{"postgres:kin", "", []string{"postgres://USER@HOST/DATABASE"}},
		{"host=db password=hunter2 dbname=kin", "", []string{"no scheme", "password=***"}},
	} {
		d, err := ParseDSN(tt.dsn, "/home")
		switch {
		case tt.err == nil && err != nil:
			t.Errorf("ParseDSN(%q): %v", tt.dsn, err)
		case tt.err == nil && tt.path != "" && (d.Driver != DriverSQLite || d.Path != tt.path):
			t.Errorf("ParseDSN(%q) = %+v, want sqlite %s", tt.dsn, d, tt.path)
		case tt.err != nil && err == nil:
			t.Errorf("ParseDSN(%q) = %+v, want an error", tt.dsn, d)
		case tt.err != nil:
			for _, want := range tt.err {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("ParseDSN(%q): %v; want it to say %q", tt.dsn, err, want)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("ParseDSN(%q): the error shows the password: %v", tt.dsn, err)
			}
		}
	}
	for _, dsn := range []string{
		"postgres://kin:hunter2@db.example:5432/kin?sslmode=require",
		"postgresql://kin@/kin?host=/run/postgresql",
	} {
		d, err := ParseDSN(dsn, "")
		if err != nil || d.Driver != DriverPostgres || d.URL != dsn {
			t.Errorf("ParseDSN(%q) = %+v, %v; want the postgres driver and the URL", dsn, d, err)
		}
		if strings.Contains(d.String(), "hunter2") {
			t.Errorf("DSN %q prints its password: %s", dsn, d)
		}
	}
	if _, err := ParseDSN("sqlite", ""); err == nil || !strings.Contains(err.Error(), "sqlite:PATH") {
		t.Errorf(`ParseDSN("sqlite") without a home: %v`, err)
	}
}

func TestIsDSN(t *testing.T) {
	for s, want := range map[string]bool{
		"sqlite:/x": true, "sqlite:///x": true, "postgres://h/db": true, "postgresql://h": true,
		"/backup/kin.db": false, "kin.db": false, "sqlite": false, "./sqlite:x": false, "mysql://x": false,
	} {
		if got := IsDSN(s); got != want {
			t.Errorf("IsDSN(%q) = %v, want %v", s, got, want)
		}
	}
}

// FuzzParseDSN: any input gives a DSN that names a SQLite file and prints
// back to itself, or a PostgreSQL URL that prints without its password, or
// an error that says which DSN (never a panic); and a password in a URL's
// user information never reaches the error or the printed DSN.
func FuzzParseDSN(f *testing.F) {
	for _, s := range []string{
		"", "sqlite", "sqlite:", "sqlite:/data/kin.db", "sqlite:///abs", "sqlite://rel", "sqlite:a:b", "sqlite:\x00",
		"postgres://u:p@h:5432/db?sslmode=disable", "postgresql://h/db?password=x", "host=h password=x",
		"mysql://x", "/data/kin.db", "1sqlite:x", ":", "://@", "a://b@c@d", "SQLITE:x", "sqlite:%00", "sqlite:\n",
		"h:notaport/db", "h/db?sslmode=sometimes",
	} {
		f.Add(s, "pw")
	}
	f.Fuzz(func(t *testing.T, dsn, secret string) {
		d, err := ParseDSN(dsn, "/home")
		switch {
		case err != nil:
			if !strings.HasPrefix(err.Error(), "store ") {
				t.Fatalf("ParseDSN(%q): %v; want the error to start with the DSN", dsn, err)
			}
		case d.Driver == DriverPostgres:
			if d.URL != dsn || d.Path != "" {
				t.Fatalf("ParseDSN(%q) = %+v", dsn, d)
			}
		default:
			if d.Driver != DriverSQLite || d.Path == "" || strings.IndexByte(d.Path, 0) >= 0 {
				t.Fatalf("ParseDSN(%q) = %+v", dsn, d)
			}
			back, err := ParseDSN(d.String(), "/home")
			if err != nil || back != d {
				t.Fatalf("ParseDSN(%q) = %+v, whose String %q parses to %+v, %v", dsn, d, d.String(), back, err)
			}
		}
		// A URL whose user information holds a marked secret: parsed or
		// refused, the secret shows nowhere.
		const mark = "S3CR3T"
		if strings.Contains(dsn, mark) || strings.Contains(secret, "@") {
			return
		}
		u := "postgres://kin:" + mark + secret + "@" + dsn
		for _, in := range []string{u, "mysql" + u[len("postgres"):]} {
			d, err := ParseDSN(in, "/home")
			switch {
			case err != nil && strings.Contains(err.Error(), mark):
				t.Fatalf("ParseDSN(%q): the error shows the secret: %v", in, err)
			case err == nil && d.Driver != DriverPostgres:
				t.Fatalf("ParseDSN(%q) = %+v; want the postgres driver or an error", in, d)
			case err == nil && strings.Contains(d.String(), mark):
				t.Fatalf("ParseDSN(%q) prints as %q, with the secret", in, d)
			}
		}
	})
}
