package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/exampletest"
)

// TestBinary builds the example, runs it as a real process, reads its first
// line, fetches its metadata and JWKS, and stops it with SIGTERM.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := exampletest.Build(t, t.TempDir(), "aauth-resource", ".")
	p := exampletest.Start(t, bin, "--person-server", "http://127.0.0.1:9")
	first := p.Line
	url, ok := strings.CutPrefix(first, "listening on http://127.0.0.1:")
	if !ok || url == "" {
		t.Fatalf("first line %q", first)
	}
	base := strings.TrimPrefix(first, "listening on ")

	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get(base + "/.well-known/aauth-resource.json")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	err = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || meta.Issuer != base || !strings.HasPrefix(meta.JWKSURI, base+"/") {
		t.Fatalf("metadata %d %+v %v", resp.StatusCode, meta, err)
	}
	resp, err = client.Get(meta.JWKSURI)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("jwks: %d", resp.StatusCode)
	}
	// Unsigned: the agent is told to sign with its agent token.
	resp, err = client.Get(base + "/api/documents")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || resp.Header.Get("AAuth-Requirement") != "requirement=agent-token" {
		t.Fatalf("unsigned: %d %q", resp.StatusCode, resp.Header.Get("AAuth-Requirement"))
	}
	if !strings.Contains(p.Stderr(), "ephemeral key") {
		t.Errorf("stderr does not say the key is ephemeral: %s", p.Stderr())
	}

	if err := p.Stop(); err != nil {
		t.Fatalf("exit after SIGTERM: %v; stderr: %s", err, p.Stderr())
	}
}
