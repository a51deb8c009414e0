package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestRenamedModelIsSplicedIntoTheBody: a request for "NAME/model" reaches
// upstream NAME as "model" with every other byte as the agent sent it (its
// order, its spacing, its escapes), not encoded again; a body kin must
// read otherwise (a name with an escape, a member named twice) still goes
// as kin read it, encoded.
func TestRenamedModelIsSplicedIntoTheBody(t *testing.T) {
	var mu sync.Mutex
	var got []byte
	g, s := gatewayServer(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = b
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	})
	send := func(body string) string {
		t.Helper()
		req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+g.Credential(1))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%q: status %d", body, resp.StatusCode)
		}
		mu.Lock()
		defer mu.Unlock()
		return string(got)
	}
	for body, want := range map[string]string{
		`{"zeta": 1,  "model" : "openai/m" , "messages":[{"role":"user","content":"\u00e9 \"model\": {y}"}] }`: `{"zeta": 1,  "model" : "m" , "messages":[{"role":"user","content":"\u00e9 \"model\": {y}"}] }`,
		"{\n\t\"messages\": [],\n\t\"model\": \"openai/gpt-4o\"\n}":                                            "{\n\t\"messages\": [],\n\t\"model\": \"gpt-4o\"\n}",
		// Read otherwise than its bytes: encoded as kin read it.
		`{"mod\u0065l":"openai/m","messages":[]}`:             `{"messages":[],"model":"m"}`,
		`{"model":"gpt-4o","messages":[],"model":"openai/m"}`: `{"messages":[],"model":"m"}`,
	} {
		if b := send(body); b != want {
			t.Errorf("%q reached the upstream as %q, want %q", body, b, want)
		}
	}
}

// FuzzSpliceMembers: a body spliced with a member's new value reads, to
// any JSON parser, as the members kin holds (json.Unmarshal's reading of
// it, changed), each once, with every other member's bytes as they came.
func FuzzSpliceMembers(f *testing.F) {
	f.Add(`{"model":"a/b","messages":[]}`, `"b"`)
	f.Add(`{ "messages" : [ {"model":"x"} ] , "model":"a/b" }`, `"b"`)
	f.Add(`{"messages":[],"n":1}`, `"added"`)
	f.Add(`{}`, `"added"`)
	f.Add(`{"model":null,"x":"}\"{"}`, `{"a":[1,2]}`)
	f.Add(`{"model":12.5e3,"y":true}`, `false`)
	f.Fuzz(func(t *testing.T, body, value string) {
		var req map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &req) != nil || req == nil || !uniqueMembers([]byte(body), len(req)) || !json.Valid([]byte(value)) {
			return
		}
		var compact bytes.Buffer
		json.Compact(&compact, []byte(value)) // as json.Marshal writes it
		value = compact.String()
		want := map[string]json.RawMessage{}
		for k, v := range req {
			want[k] = v
		}
		req["model"] = json.RawMessage(value)
		want["model"] = json.RawMessage(value)
		out, ok := spliceMembers([]byte(body), req, "model")
		if !ok {
			if !bytes.Contains([]byte(body), []byte(`\`)) {
				t.Fatalf("%q: not spliced, and its names hold no escape", body)
			}
			return
		}
		var read map[string]json.RawMessage
		if err := json.Unmarshal(out, &read); err != nil {
			t.Fatalf("%q spliced into %q: %v", body, out, err)
		}
		if !uniqueMembers(out, len(read)) || len(read) != len(want) {
			t.Fatalf("%q spliced into %q: %d members, want %d, each once", body, out, len(read), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(read[k], v) {
				t.Fatalf("%q spliced into %q: %q is %s, want %s", body, out, k, read[k], v)
			}
		}
	})
}
