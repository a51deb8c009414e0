// Package storeopen opens a store by its DSN: the one place that knows
// every driver and picks one by the DSN's scheme.
//
// It is a package of its own because nothing else can hold the switch:
// package store defines the interfaces its drivers implement, so it cannot
// import them (store/sqlite imports store), and a registry that drivers
// fill from init() is the package-level mutable state STYLE.md rules out.
// The composition roots (the daemon's Start, `kin log verify --db`) import
// this package; nothing else imports a driver outside tests.
//
// It must never do more than parse and dispatch: what a store does is the
// driver's, what the daemon does with it is the daemon's.
package storeopen

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/postgres"
	"github.com/kin-agents/kin/internal/store/sqlite"
)

// Options are what opening a store may need beyond its DSN.
type Options struct {
	// Home is where the DSNs "" and "sqlite" put the database (kin.db).
	Home string
	// Synchronous is SQLite's synchronous pragma: "FULL" (the default) or
	// "NORMAL". PostgreSQL's durability is the server's
	// (synchronous_commit).
	Synchronous string
	// OnlyWriter: the caller is the store's only writer while it is open
	// (sqlite.Options.OnlyWriter); PostgreSQL, which a fleet shares,
	// ignores it.
	OnlyWriter bool
}

// Open parses dsn (ParseDSN) and opens that store, creating and migrating
// it as the driver does.
func Open(ctx context.Context, dsn string, opts Options) (store.Store, error) {
	d, err := ParseDSN(dsn, opts.Home)
	if err != nil {
		return nil, err
	}
	switch d.Driver {
	case DriverSQLite:
		s, err := sqlite.Open(ctx, d.Path, sqlite.Options{Synchronous: opts.Synchronous, OnlyWriter: opts.OnlyWriter})
		if err != nil {
			return nil, err
		}
		return s, nil
	case DriverPostgres:
		s, err := postgres.Open(ctx, d.URL, postgres.Options{})
		if err != nil {
			return nil, redactErr(d, err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("store %s: no driver %q", d, d.Driver) // ParseDSN returns only drivers handled above
}

// LogReader is a store opened only to read its event log.
type LogReader interface {
	auditlog.Source
	Close() error
}

// OpenReadOnly opens the store dsn names only to read its log (`kin log
// verify --db`): it never creates, migrates or writes, and needs no
// daemon.
func OpenReadOnly(ctx context.Context, dsn string, opts Options) (LogReader, error) {
	d, err := ParseDSN(dsn, opts.Home)
	if err != nil {
		return nil, err
	}
	switch d.Driver {
	case DriverSQLite:
		r, err := sqlite.OpenReadOnly(ctx, d.Path)
		if err != nil {
			return nil, err
		}
		return r, nil
	case DriverPostgres:
		r, err := postgres.OpenReadOnly(ctx, d.URL)
		if err != nil {
			return nil, redactErr(d, err)
		}
		return r, nil
	}
	return nil, fmt.Errorf("store %s: no driver %q", d, d.Driver)
}

// redactErr is a driver's error with anything of d's secrets hidden: pgx
// quotes a DSN it cannot use, and a server's message may echo a user.
func redactErr(d DSN, err error) error {
	msg := Redact(err.Error())
	if u, perr := url.Parse(d.URL); perr == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "***")
		}
	}
	return errors.New(msg)
}
