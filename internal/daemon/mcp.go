package daemon

import (
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/mcpserver"
	"github.com/kin-agents/kin/internal/personserver"
)

// PathMCP is where the HTTP address serves kin's MCP tools, over the
// streamable HTTP transport, for remote MCP clients.
const PathMCP = "/mcp"

// mcpHandler serves kin's MCP tools on the HTTP address to two kinds of
// caller:
//
//   - the operator: the operator token as a bearer token (or the
//     dashboard's session). Its calls act as the operator, as "kin mcp"
//     outside any agent does, or with kin.HeaderActAs for one of its
//     agents, and may name files (refs, a template) on this machine, which
//     the daemon reads.
//   - an agent: a request signed with the agent's key, presenting its
//     agent token in Signature-Key (HTTP message signatures, as AAuth's
//     auth-token endpoint takes them), each signature accepted once. Its
//     calls act as that agent, on itself and its descendants only,
//     exactly as "kin mcp" inside it would; the daemon reads no file for
//     it.
//
// Anyone else gets 401: the API's JSON error, or Signature-Error when a
// signature was offered and does not hold (or was already accepted); 503
// when kin has no room to remember another signature.
func (d *Daemon) mcpHandler(api *httpapi.Server) http.Handler {
	tools := mcpserver.NewHTTPHandler(mcpserver.Options{Version: d.cfg.Version})
	// The operator's caller is the zero one, unless the request acts for
	// an agent (ActingAs sets it then).
	operator := api.Protect(api.ActingAs(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tools.ServeHTTP(w, r.WithContext(mcpserver.WithCaller(r.Context(), mcpserver.Caller{Service: d, ReadsFiles: true})))
	})))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The SDK's own limit, applied before anything reads the body:
		// checking a signature reads all of it first, for its digest.
		r.Body = http.MaxBytesReader(w, r.Body, mcp.DefaultMaxRequestBodyBytes)
		if r.Header.Get(httpsig.HeaderSignatureKey) == "" && r.Header.Get(httpsig.HeaderSignature) == "" {
			operator.ServeHTTP(w, r)
			return
		}
		agent, err := d.Server.SignedAgent(r)
		if err != nil {
			d.Server.LogSignatureRefusal("mcp request refused", err)
			personserver.WriteSignatureRefusal(w, err)
			return
		}
		ctx := caller.With(r.Context(), caller.Caller{Agent: agent.ID})
		tools.ServeHTTP(w, r.WithContext(mcpserver.WithCaller(ctx, mcpserver.Caller{Service: d})))
	})
}
