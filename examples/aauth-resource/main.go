// Command aauth-resource is a minimal AAuth resource: it publishes its
// metadata and keys, and serves GET /api/documents to agents that present an
// auth token from the person server it trusts (kin).
//
//	go run ./examples/aauth-resource --person-server http://127.0.0.1:7420
package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kin-agents/kin/aauth"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "aauth-resource:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("aauth-resource", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	issuer := fs.String("issuer", "", "this resource's URL (default http://<listen address>)")
	personServer := fs.String("person-server", "", "the trusted person server's URL, e.g. kin's issuer (required)")
	scope := fs.String("scope", "data.read", "scopes GET /api/documents needs (space-separated)")
	keyFile := fs.String("key", "", "Ed25519 private key, PKCS#8 PEM (default: an ephemeral key)")
	checkRevocation := fs.Bool("check-revocation", true, "ask the person server's token_status_endpoint about every auth token")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *personServer == "" {
		return errors.New("--person-server is required")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	var key ed25519.PrivateKey
	if *keyFile != "" {
		k, err := aauth.LoadKey(*keyFile)
		if err != nil {
			return err
		}
		key = k
	} else {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return err
		}
		key = k
		fmt.Fprintln(stderr, "aauth-resource: no --key given: using an ephemeral key (resource tokens will not verify after a restart)")
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	url := "http://" + ln.Addr().String()
	if *issuer == "" {
		*issuer = url
	}
	res, err := aauth.NewResource(aauth.ResourceConfig{
		Issuer:          *issuer,
		Key:             key,
		PersonServer:    *personServer,
		Scope:           func(*http.Request) string { return *scope },
		CheckRevocation: *checkRevocation,
		Logger:          log,
	})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /.well-known/", res.MetadataHandler())
	mux.Handle("GET /api/documents", res.Middleware(http.HandlerFunc(documents)))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	fmt.Fprintf(stdout, "listening on %s\n", url)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// documents answers an agent whose auth token the middleware accepted.
func documents(w http.ResponseWriter, r *http.Request) {
	c, _ := aauth.AuthFromContext(r.Context())
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"documents": []string{"q3-report.pdf", "roadmap.md"},
		"sub":       c.Sub,
		"agent_jkt": aauth.Thumbprint(c.Cnf.JWK),
	})
}
