package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestDevFakeModel runs "kin dev fake-model" as a user would, reads the
// URL it prints, calls it with and without its key, and stops it.
func TestDevFakeModel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errb strings.Builder
	done := make(chan int, 1)
	t.Setenv(fakeModelEnvKey, "from-env")
	go func() {
		done <- Run(ctx, []string{"dev", "fake-model", "--json", "--input-tokens", "7", "--output-tokens", "3", "--reply", "hi"},
			strings.NewReader(""), pw, &errb)
		pw.Close()
	}()
	br := bufio.NewReader(pr)
	var out struct{ URL string }
	if err := json.NewDecoder(br).Decode(&out); err != nil || !strings.HasPrefix(out.URL, "http://127.0.0.1:") {
		t.Fatalf("printed %+v: %v (stderr %s)", out, err, errb.String())
	}
	go io.Copy(io.Discard, br)
	post := func(key string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", out.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, v
	}
	if code, _ := post("wrong"); code != 401 {
		t.Errorf("a wrong key: %d, want 401", code)
	}
	code, v := post("from-env")
	if code != 200 {
		t.Fatalf("the key from %s: %d %v", fakeModelEnvKey, code, v)
	}
	usage := v["usage"].(map[string]any)
	if usage["prompt_tokens"] != 7.0 || usage["completion_tokens"] != 3.0 {
		t.Errorf("usage %v, want 7 in and 3 out", usage)
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Errorf("exit %d after the interrupt; stderr %s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("kin dev fake-model did not stop within 10s of its context's end")
	}

	// A bad flag value is named.
	r := runCLI(t, "dev", "fake-model", "--output-tokens", "-1")
	if r.code != ExitError || !strings.Contains(r.stderr, "OutputTokens") {
		t.Errorf("--output-tokens -1: exit %d, stderr %q", r.code, r.stderr)
	}
}
