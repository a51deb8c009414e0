package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/authority"
	"github.com/kin-agents/kin/kin"
)

func TestCredentials(t *testing.T) {
	c := newCredentials([]byte("0123456789abcdef0123456789abcdef"))
	other := newCredentials([]byte("fedcba9876543210fedcba9876543210"))
	for _, id := range []kin.AgentID{1, 42, 1 << 40} {
		tok := c.For(id)
		if got := c.Check(tok); got != id {
			t.Fatalf("Check(For(%d)) = %d", id, got)
		}
		if got := other.Check(tok); got != 0 {
			t.Fatalf("another key accepted agent %d's credential", id)
		}
		// The reused HMACs give what a fresh one gives, from any number
		// of goroutines at once.
		if fresh := newCredentials(c.key).For(id); fresh != tok {
			t.Fatalf("agent %d: a reused HMAC made %q, a fresh one %q", id, tok, fresh)
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 50 {
					if c.For(id) != tok || c.Check(tok) != id {
						t.Errorf("agent %d's credential changed under concurrent use", id)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	tok := c.For(7)
	mac := strings.TrimPrefix(tok, credPrefix+"7-")
	for _, bad := range []string{"", credPrefix, tok + "x", tok[:len(tok)-1], credPrefix + "8-" + mac, credPrefix + "07-" + mac,
		credPrefix + "-7-" + mac, credPrefix + "0-" + c.mac(0), strings.ToUpper(tok), "Bearer " + tok} {
		if got := c.Check(bad); got != 0 {
			t.Errorf("Check(%q) = %d", bad, got)
		}
	}
}

func TestParseUpstream(t *testing.T) {
	for spec, want := range map[string]string{
		"openai=https://api.openai.com":        "https://api.openai.com",
		"openai=https://api.openai.com/v1":     "https://api.openai.com",
		"openai=https://api.openai.com/v1/":    "https://api.openai.com",
		"x=http://127.0.0.1:8000/proxy/v1":     "http://127.0.0.1:8000/proxy",
		"anthropic=https://api.anthropic.com/": "https://api.anthropic.com",
	} {
		_, u, err := ParseUpstream(spec)
		if err != nil || u.String() != want {
			t.Errorf("ParseUpstream(%q) = %v, %v; want %s", spec, u, err, want)
		}
	}
	for _, bad := range []string{"", "openai", "=http://x", "openai=", "openai=x", "openai=file:///etc", "openai=http://", "openai=http://x?q=1",
		"openai=http://u:p@x", "Open=http://x", "-x=http://x", strings.Repeat("a", 33) + "=http://x"} {
		if _, _, err := ParseUpstream(bad); err == nil {
			t.Errorf("ParseUpstream(%q) took it", bad)
		}
	}
}

func TestParseKeyNeverShowsTheKey(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"GOOD": " sk-good-0123 ", "SPACE": "sk bad key"}[k]
	}
	files := map[string]string{"/k": "sk-file-0123\n", "/empty": "\n", "/bin": "sk-\x00bad"}
	readFile := func(p string) ([]byte, error) {
		if v, ok := files[p]; ok {
			return []byte(v), nil
		}
		return nil, errors.New("open " + p + ": no such file")
	}
	for spec, want := range map[string]string{"a=$GOOD": "sk-good-0123", "a=@/k": "sk-file-0123", "a=none": ""} {
		_, k, err := ParseKey(spec, getenv, readFile)
		if err != nil || k.Reveal() != want {
			t.Errorf("ParseKey(%q) = %q, %v", spec, k.Reveal(), err)
		}
	}
	for _, bad := range []string{"a=sk-literal", "a=$", "a=@", "a=$MISSING", "a=$SPACE", "a=@/empty", "a=@/bin", "a=@/nofile", "a=$A=B"} {
		_, _, err := ParseKey(bad, getenv, readFile)
		if err == nil {
			t.Errorf("ParseKey(%q) took it", bad)
			continue
		}
		for _, secret := range []string{"sk-literal", "sk bad", "sk-\x00"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("ParseKey(%q): the error shows the key: %v", bad, err)
			}
		}
	}
}

func TestUsageOfBody(t *testing.T) {
	for _, c := range []struct {
		api  API
		body string
		want usage
	}{
		{OpenAI, `{"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}`, usage{10, 5, 4}},
		{OpenAI, `{"usage":{"input_tokens":7,"output_tokens":3,"input_tokens_details":{"cached_tokens":9}}}`, usage{7, 3, 7}},
		{OpenAI, `{"usage":{"prompt_tokens":8,"total_tokens":8}}`, usage{8, 0, 0}},
		{Anthropic, `{"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":4,"cache_creation_input_tokens":2}}`, usage{16, 5, 4}},
		{Anthropic, `{"usage":{"input_tokens":-3,"output_tokens":5}}`, usage{0, 5, 0}},
		{OpenAI, `{"usage":null}`, usage{}},
		{OpenAI, `not json`, usage{}},
	} {
		if got := usageOfBody(c.api, []byte(c.body)); got != c.want {
			t.Errorf("%s %s = %+v, want %+v", c.api, c.body, got, c.want)
		}
	}
}

// mockAuthority stands in for the permission authority in the tests of
// the stream parser alone (the daemon's tests run the real one).
type mockAuthority struct{ calls []kin.ModelCallData }

func (m *mockAuthority) ModelGate(kin.AgentID) (authority.ModelAdmitter, error) { return m, nil }

func (m *mockAuthority) Admit(string) (*authority.ModelLimit, error) {
	return &authority.ModelLimit{}, nil
}

func (m *mockAuthority) Exhausted() error { return nil }

func (m *mockAuthority) ModelCall(_ context.Context, c kin.ModelCallData) (*kin.Spend, error) {
	m.calls = append(m.calls, c)
	return &kin.Spend{}, nil
}

func streamThrough(t testing.TB, ep endpoint, wantUsage bool, body string) (*mockAuthority, string) {
	m := &mockAuthority{}
	g, err := New(Config{Key: make([]byte, 32), Authority: m, Runs: func(kin.AgentID) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(body))}
	rec := httptest.NewRecorder()
	g.stream(rec, httptest.NewRequest("POST", ep.path, nil), ep, resp, &call{wantUsag: wantUsage, counted: true})
	return m, rec.Body.String()
}

func TestStreamUsageWithMockAuthority(t *testing.T) {
	chat := "data: {\"choices\":[{\"delta\":{\"content\":\"o\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5}}\r\n\r\n" +
		"data: [DONE]\n\n"
	m, out := streamThrough(t, epChat, false, chat)
	if len(m.calls) != 1 || m.calls[0].Tokens != 15 || strings.Contains(out, `"prompt_tokens"`) || !strings.Contains(out, "[DONE]") {
		t.Fatalf("chat: %+v\n%s", m.calls, out)
	}
	if m, out = streamThrough(t, epChat, true, chat); len(m.calls) != 1 || !strings.Contains(out, `"prompt_tokens"`) {
		t.Fatalf("chat, usage asked: %+v\n%s", m.calls, out)
	}
	msgs := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":4,\"output_tokens\":1}}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	if m, out = streamThrough(t, epMessages, false, msgs); len(m.calls) != 1 || m.calls[0].InputTokens != 14 || m.calls[0].OutputTokens != 5 || out != msgs {
		t.Fatalf("messages: %+v\n%s", m.calls, out)
	}
	resp := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":2}}}\n\n"
	if m, _ = streamThrough(t, epResponses, false, resp); len(m.calls) != 1 || m.calls[0].Tokens != 5 {
		t.Fatalf("responses: %+v", m.calls)
	}
	// An event's data in several lines is their values joined by "\n".
	split := "event: message_start\ndata: {\"type\":\"message_start\",\ndata:\"message\":{\"usage\":{\"input_tokens\":10}}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\ndata: \"usage\":\ndata: {\"output_tokens\":5}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	if m, out = streamThrough(t, epMessages, false, split); len(m.calls) != 1 || m.calls[0].InputTokens != 10 || m.calls[0].OutputTokens != 5 || out != split {
		t.Fatalf("data in several lines: %+v\n%s", m.calls, out)
	}
	// A stream cut short is metered with what it said.
	if m, _ = streamThrough(t, epMessages, false, msgs[:strings.Index(msgs, "event: message_delta")]); len(m.calls) != 1 || m.calls[0].InputTokens != 14 {
		t.Fatalf("cut: %+v", m.calls)
	}
}

func FuzzStreamWithMockAuthority(f *testing.F) {
	f.Add("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10}}\n\ndata: [DONE]\n\n", 0)
	f.Add("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n", 1)
	f.Add("data:\ndata\n\n\r\n:comment\n", 2)
	f.Fuzz(func(t *testing.T, body string, which int) {
		eps := []endpoint{epChat, epMessages, epResponses}
		ep, wantUsage := eps[(which%3+3)%3], which%2 == 0
		m, out := streamThrough(t, ep, wantUsage, body)
		// Every byte goes on as it came, but the usage chunk kin asked
		// for itself.
		if (ep != epChat || wantUsage) && out != body {
			t.Fatalf("%q went on as %q", body, out)
		}
		if len(m.calls) != 1 {
			t.Fatalf("metered %d times", len(m.calls))
		}
		if c := m.calls[0]; c.InputTokens < 0 || c.OutputTokens < 0 || c.CachedTokens < 0 || c.CachedTokens > c.InputTokens && c.API == "openai" {
			t.Fatalf("usage %+v", c)
		}
	})
}

func FuzzParseSpecs(f *testing.F) {
	for _, s := range []string{"openai=https://api.openai.com/v1", "a=@/k", "a=$K", "a=none", "x=anthropic", "=", "a=http://[::1]:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ParseUpstream(s)
		ParseAPI(s)
		_, k, err := ParseKey(s, func(string) string { return "sk-secret-value" }, func(string) ([]byte, error) { return []byte("sk-secret-value"), nil })
		if err != nil && strings.Contains(err.Error(), "sk-secret-value") {
			t.Fatalf("the error shows the key: %v", err)
		}
		if err == nil && k.Reveal() != "" && k.Reveal() != "sk-secret-value" {
			t.Fatalf("key %q", k.Reveal())
		}
		newCredentials([]byte("k")).Check(s)
	})
}

// TestPeerUID: the kernel's table names the uid holding the other end of a
// real loopback connection, over IPv4 and IPv6.
func TestPeerUID(t *testing.T) {
	for _, network := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", network)
		if err != nil {
			t.Logf("%s: %v (skipped)", network, err)
			continue
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", "/", nil).WithContext(ConnContext(context.Background(), s))
		uid, err := peerUID(r)
		if err != nil || uid != uint32(os.Geteuid()) {
			t.Errorf("%s: peer uid %d, %v; want %d", network, uid, err, os.Geteuid())
		}
		// A connection that is not in the table (another machine's).
		if _, err := lookupTCPUID(netip.MustParseAddrPort("192.0.2.1:1234"), netip.MustParseAddrPort("192.0.2.2:80")); !errors.Is(err, errNotLocal) {
			t.Errorf("an unknown connection: %v", err)
		}
		c.Close()
		s.Close()
		ln.Close()
	}
	for _, bad := range []string{"", "0100007F", "0100007F:XYZ", "01:0050", "zz00007F:0050"} {
		if _, err := parseProcAddr([]byte(bad)); err == nil {
			t.Errorf("parseProcAddr(%q) took it", bad)
		}
	}
}

// TestSockDiagAgreesWithProc: the kernel's socket diagnostics name the
// same owner as /proc/net/tcp for real loopback connections, IPv4, IPv6
// and (as root) one made as another uid, and nothing for a connection
// that is not there.
func TestSockDiagAgreesWithProc(t *testing.T) {
	uids := []int{os.Geteuid()}
	if os.Geteuid() == 0 {
		uids = append(uids, 65534)
	}
	for _, network := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", network)
		if err != nil {
			t.Logf("%s: %v (skipped)", network, err)
			continue
		}
		for _, uid := range uids {
			c, err := dialAs(uid, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			client, server := c.LocalAddr().(*net.TCPAddr).AddrPort(), s.LocalAddr().(*net.TCPAddr).AddrPort()
			got, err := diagTCPUID(client, server)
			if errors.Is(err, errNoDiag) {
				t.Skip("socket diagnostics refused here")
			}
			want, werr := scanTCPUID(client, server)
			if err != nil || werr != nil || got != want || got != uint32(uid) {
				t.Errorf("%s as uid %d: sock_diag %d, %v; /proc %d, %v", network, uid, got, err, want, werr)
			}
			// The server's end is the daemon's: not the client's socket.
			if got, err := diagTCPUID(server, client); err != nil || got != uint32(os.Geteuid()) {
				t.Errorf("%s: the server's end: %d, %v", network, got, err)
			}
			c.Close()
			s.Close()
		}
		ln.Close()
	}
	for _, tuple := range [][2]string{{"192.0.2.1:1234", "192.0.2.2:80"}, {"[2001:db8::1]:1234", "[2001:db8::2]:80"}} {
		if _, err := diagTCPUID(netip.MustParseAddrPort(tuple[0]), netip.MustParseAddrPort(tuple[1])); !errors.Is(err, errNotLocal) && !errors.Is(err, errNoDiag) {
			t.Errorf("an unknown connection %v: %v", tuple, err)
		}
	}
}

// dialAs connects to addr with a socket made as uid (its fsuid for that
// moment, on a locked thread), as an agent's process would.
func dialAs(uid int, addr string) (net.Conn, error) {
	if uid == os.Geteuid() {
		return net.Dial("tcp", addr)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := unix.SetfsuidRetUid(uid)
	if err != nil {
		return nil, err
	}
	defer unix.Setfsuid(prev)
	return net.Dial("tcp", addr)
}

// BenchmarkPeerUID: one lookup of a loopback connection's owner, by
// socket diagnostics and by reading /proc/net/tcp (which costs a line per
// socket of the namespace: the machine's load decides it).
func BenchmarkPeerUID(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	client, server := c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
	for _, m := range []struct {
		name string
		fn   func(netip.AddrPort, netip.AddrPort) (uint32, error)
	}{{"sockdiag", diagTCPUID}, {"proc", scanTCPUID}} {
		b.Run(m.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := m.fn(client, server); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
