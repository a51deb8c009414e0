package daemon_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// TestOperatorActsForAnAgentAndNobodyElseMay: with kin.HeaderActAs the
// operator (on the socket, or over HTTP with its token) is answered as the
// agent it names, by id or by name: its spawns are that agent's children,
// and it may act only on that agent's subtree. An agent sending the
// header, on its own socket or on the operator's, is refused; so are a
// value that is neither an id nor a name, an unknown id or name, an agent
// that has ended, and the header without the operator token over HTTP.
func TestOperatorActsForAnAgentAndNobodyElseMay(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	session, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "claude-session", Responsible: "Dr. Schmidt"})
	if err != nil {
		t.Fatal(err)
	}
	other := spawnAgent(t, d.Client, "other", 0, "sleep")

	tcp, err := client.New(client.Config{Addr: d.HTTPAddr(), Token: d.OperatorToken()})
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	for via, c := range map[string]*client.Client{"socket": d.Client.ActingAs(session.ID.String()), "http": tcp.ActingAs(session.Name)} {
		me, err := c.Whoami(ctx)
		if err != nil || me == nil || me.ID != session.ID {
			t.Fatalf("%s: whoami acting for %d: %+v, %v", via, session.ID, me, err)
		}
		kid := spawnAgent(t, c, "helper-"+via, 0, "sleep")
		if kid.Parent != session.ID || kid.CreatedBy != kin.AgentCreatedBy(session.ID) {
			t.Errorf("%s: a spawn acting for the session: parent %d, created by %q", via, kid.Parent, kid.CreatedBy)
		}
		if _, err := c.Stop(ctx, kin.StopRequest{ID: other.ID}); kin.ErrorCodeOf(err) != kin.ECodeForbidden {
			t.Errorf("%s: stopping an agent outside the session's subtree: %v, want forbidden", via, err)
		}
		if _, err := c.Stop(ctx, kin.StopRequest{ID: kid.ID}); err != nil {
			t.Errorf("%s: stopping the session's own child: %v", via, err)
		}
	}
	if a, err := d.Client.Agent(ctx, other.ID); err != nil || !a.Running() {
		t.Errorf("other after the refused stops: %+v, %v; want it running", a, err)
	}

	for _, c := range []struct {
		value string
		code  kin.ErrorCode
	}{{"x 1", kin.ECodeInvalid}, {"-3", kin.ECodeInvalid}, {"999", kin.ECodeNotFound}, {"nobody-here", kin.ECodeNotFound}} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.HTTPAddr()+"/v1/whoami", nil)
		req.Header.Set("Authorization", "Bearer "+d.OperatorToken())
		req.Header.Set(kin.HeaderActAs, c.value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e kin.Error
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if err != nil || e.Code != c.code || !strings.Contains(e.Message, kin.HeaderActAs) {
			t.Errorf("%s: %q: %s %+v (%v); want %s", kin.HeaderActAs, c.value, resp.Status, e, err, c.code)
		}
	}
	noToken, _ := client.New(client.Config{Addr: d.HTTPAddr()})
	if _, err := noToken.ActingAs(session.ID.String()).Whoami(ctx); kin.ErrorCodeOf(err) != kin.ECodeUnauthorized {
		t.Errorf("acting for an agent without the operator token: %v, want unauthorized", err)
	}

	// An agent may not act for another, on any socket.
	out := outPath(t)
	spawnAgent(t, d.Client, "impostor", 0, "act-as "+session.ID.String(), withEnv("KINTEST_OUT="+out, "KINTEST_OPSOCK="+d.SocketPath()))
	got := waitOut(t, out, "act-as op: ")
	// An agent running as its own uid cannot even reach the operator
	// socket (0600, the daemon's); one running as the daemon's user
	// reaches it and is refused.
	wantOp := "act-as op: forbidden"
	if d.Config.AgentUIDs {
		wantOp = "act-as op: unavailable"
	}
	for _, want := range []string{"act-as own: forbidden", wantOp} {
		if !strings.Contains(got, want) {
			t.Errorf("an agent acting for the session: %q, want %q", got, want)
		}
	}

	// Nobody acts for an agent that has ended.
	if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: other.ID}); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 20*time.Second, "other to end", func() bool {
		a, err := d.Client.Agent(ctx, other.ID)
		return err == nil && !a.Live()
	})
	if _, err := d.Client.ActingAs(other.ID.String()).Whoami(ctx); kin.ErrorCodeOf(err) != kin.ECodeForbidden {
		t.Errorf("acting for an ended agent: %v, want forbidden", err)
	}
}
