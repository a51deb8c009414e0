package httpsig

import (
	"testing"
	"time"
)

// TestAttackReplayAtWindowEdgeAfterConcurrentPrune: Replays.Verify takes
// now from its caller, read before the signature is verified (the agent
// token, Ed25519: a millisecond and more under load), and prunes with it
// under the lock. Requests are not serialized by now: one that read now =
// T+1 and reached the lock first prunes the bucket of second T-60, and a
// replay that read now = T just before (its created T-60 is still inside
// the window at T) then finds no record of its signature and is accepted
// a second time. In the daemon, the attacker sends the replay of a
// signature captured 60 s ago at the turn of the second, beside any signed
// request of its own.
func TestAttackReplayAtWindowEdgeAfterConcurrentPrune(t *testing.T) {
	key := testKey("edge")
	t0 := time.Unix(1800000000, 0)
	r := NewReplays(t0, 0)
	captured := signedPost(t, key, t0, "", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"spawn_agent"}}`)
	if _, err := r.Verify(again(t, captured), t0, insecureKeyFromUnverifiedJWT); err != nil {
		t.Fatalf("the first use: %v", err)
	}
	// T = t0+60: the replay's handler reads now = T (the last second
	// the window accepts created t0), and is still verifying when the
	// clock turns. Another signed request, whose handler read now = T+1,
	// reaches the cache first.
	edge := t0.Add(Window)
	other := signedPost(t, key, edge.Add(time.Second), "", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if _, err := r.Verify(other, edge.Add(time.Second), insecureKeyFromUnverifiedJWT); err != nil {
		t.Fatalf("the other request: %v", err)
	}
	if _, err := r.Verify(again(t, captured), edge, insecureKeyFromUnverifiedJWT); err == nil {
		t.Fatal("a signature already accepted was accepted again: the replay's now (created + 60 s, inside the window) " +
			"was read before a request with a later now pruned its second from the cache")
	}
}
