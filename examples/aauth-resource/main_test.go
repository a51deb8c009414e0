package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestBinary builds the example, runs it as a real process, reads its first
// line, fetches its metadata and JWKS, and stops it with SIGTERM.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "aauth-resource")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--person-server", "http://127.0.0.1:9")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		if s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	var first string
	select {
	case first = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatalf("no first line; stderr: %s", stderr.String())
	}
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
	if !strings.Contains(stderr.String(), "ephemeral key") {
		t.Errorf("stderr does not say the key is ephemeral: %s", stderr.String())
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	exited = true
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v; stderr: %s", err, stderr.String())
	}
}

// syncBuffer is the child's stderr, written by exec's copier goroutine and
// read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
