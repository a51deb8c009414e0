package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ServerConfig says where a Server listens over TCP and whom it lets in.
type ServerConfig struct {
	// Listen is the address it listens on besides its socket (one of the
	// host's addresses, e.g. a test bridge's).
	Listen netip.Addr
	// Port is its TCP port (and its socket's name); 0 is 5432.
	Port int
	// Allow are the clients it lets in over TCP, with a password
	// (scram-sha-256); every other TCP client is refused.
	Allow netip.Prefix
}

func (c *ServerConfig) port() int {
	if c.Port == 0 {
		return 5432
	}
	return c.Port
}

// Server is a cluster of a test's own, reachable over TCP with a password
// as a server on another machine is (the test binary's cluster, which
// NewDatabase uses, has the Unix socket only). It runs, like that one, as
// an unprivileged user from an OS thread held with PDEATHSIG, and its
// files are kinpg-PID-*, swept likewise after a killed test binary.
type Server struct {
	c *cluster
}

// StartServer starts a cluster for t, listening on cfg.Listen as well as
// its socket, and stops it and removes its files when t ends. It skips t
// where PostgreSQL's server is missing (fails it under EnvRequire). It
// needs no TestMain: t's cleanup stops it.
func StartServer(t testing.TB, cfg ServerConfig) *Server {
	t.Helper()
	if !cfg.Listen.IsValid() || !cfg.Allow.IsValid() {
		t.Fatalf("pgtest: StartServer needs an address to listen on and the clients to allow (%+v)", cfg)
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		t.Fatalf("pgtest: port %d is not a TCP port", cfg.Port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := start(ctx, &cfg)
	if err != nil {
		var missing *MissingError
		if errors.As(err, &missing) && os.Getenv(EnvRequire) != "1" {
			t.Skipf("pgtest: %v", err)
		}
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return &Server{c: c}
}

// NewDatabase makes a role user with password (LOGIN, no other right)
// and a fresh database it owns, and returns the DSN that reaches it over
// TCP: postgres://USER:PASSWORD@LISTEN:PORT/DB?sslmode=disable. Both go
// with the server.
func (s *Server) NewDatabase(t testing.TB, user, password string) string {
	t.Helper()
	if user == "" || password == "" || strings.ContainsRune(password, 0) {
		t.Fatal("pgtest: a database over TCP needs a user and a password (without NUL)")
	}
	s.c.adminMu.Lock()
	defer s.c.adminMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	db := sanitize(user) + "_db"
	// CREATE ROLE takes no parameter: the password is a quoted literal.
	if _, err := s.c.admin.Exec(ctx, "CREATE ROLE "+pgx.Identifier{user}.Sanitize()+" LOGIN PASSWORD "+quoteLiteral(password)); err != nil {
		t.Fatalf("pgtest: create role %s: %v", user, err)
	}
	if _, err := s.c.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()+" OWNER "+pgx.Identifier{user}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", db, err)
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, password),
		Host:     s.Addr().String(),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Addr is the server's TCP address.
func (s *Server) Addr() netip.AddrPort {
	return netip.AddrPortFrom(s.c.tcp.Listen, uint16(s.c.tcp.port()))
}

// SocketDSN is a DSN for database db as the superuser over the server's
// Unix socket (trust: only root and the server's user reach it).
func (s *Server) SocketDSN(db string) string { return s.c.dsn(db) }

// Pid is the server's (the postmaster's) pid.
func (s *Server) Pid() int { return s.c.cmd.Process.Pid }

// Dir is the cluster's directory (kinpg-PID-*), removed when it stops.
func (s *Server) Dir() string { return s.c.dir }

// Exited is closed once the server has exited.
func (s *Server) Exited() <-chan struct{} { return s.c.exited }

// String describes the server for messages.
func (s *Server) String() string {
	return fmt.Sprintf("postgres pid %d on %s and %s (server %d)", s.Pid(), s.Addr(), s.c.sock, s.c.version)
}

// quoteLiteral quotes s as an SQL string literal (standard_conforming_strings
// is on: only the quote doubles).
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
