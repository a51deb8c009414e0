package daemon_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	"github.com/kin-agents/kin/aauth"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkAuthTokenIssuance measures seed 004's parent-mediated
// authorization end to end over HTTP on loopback: the parent signs a POST
// /auth-token carrying a sub-agent token and a resource token; kin verifies
// the HTTP signature, the parent's and the sub-agent's agent tokens and the
// resource token, checks the registry and the grant, signs the auth token
// and records it with its event. The raw floor, measured in the same run, is
// one Ed25519 sign and two verifies (the yardstick). Report
// issuances/s and the ratio to the floor in docs/PERFORMANCE.md.
func BenchmarkAuthTokenIssuance(b *testing.B) {
	b.Run("raw-ed25519-1sign-2verify", func(b *testing.B) {
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		msg := make([]byte, 600)
		sig := ed25519.Sign(priv, msg)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ed25519.Sign(priv, msg)
				for range 2 { // the floor is one sign and two verifies
					if !ed25519.Verify(pub, msg, sig) {
						b.Fatal("verify")
					}
				}
			}
		})
	})
	b.Run("kin-over-http", func(b *testing.B) {
		d := kintest.StartDaemon(b, kintest.WithHTTP())
		ctx := context.Background()
		ps := "http://" + d.HTTPAddr()
		apKeys := kinJWKS(b, ps, "/.well-known/jwks.json")
		res := newTestResource(b, ps)
		top := spawnWithToken(b, d, "planner", 0, apKeys)
		sub := spawnWithToken(b, d, "search1", top.ID, apKeys)
		if _, err := d.Client.Grant(ctx, kin.GrantRequest{Agent: top.ID, Resource: res.url, Scope: "data.read"}); err != nil {
			b.Fatal(err)
		}
		req := aauth.AuthTokenRequest{ResourceToken: res.tokenFor(b, sub, "data.read"), SubagentToken: sub.token}
		// Parents ask concurrently (16 per core): each issuance waits for
		// its durable commit, which the store shares among them.
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			signer := &aauth.Agent{Key: top.signer.Key, Token: top.signer.Token}
			for pb.Next() {
				if _, err := signer.RequestAuthToken(ctx, ps, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "issuances/s")
	})
}
