package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/aauth"
	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/kin"
)

func (a *app) tokenCommand() *cobra.Command {
	var decode bool
	cmd := &cobra.Command{
		Use:   "token [--decode]",
		Short: "Print the calling agent's AAuth agent token",
		Long: `Print the agent token (an aa-agent+jwt, signed by kin as the agent provider)
of the agent this runs in. Its cnf.jwk is the public half of the agent's own
key, whose private half is in its session ($KIN_AGENT_KEY) and nowhere
else. A sub-agent's token names its parent (parent_agent, and act.agent in
seed 004's form) and never outlives the parent's.

kin reuses a token until half its lifetime (an hour by default) has passed,
then issues a fresh one: run "kin token" again whenever you need one.

With --decode, prints the token's header and claims as JSON instead (no
secret is in them). With --json, the token with its sub, issuer, expiry and
the key's path.

Exit status: 0 on success, 1 when there is no token (outside an agent, or
the agent is suspended, revoked or stopped), 2 when the command line is
wrong.`,
		Example: `  kin token
  kin token --decode
  curl -H "Signature-Key: sig=jwt;jwt=\"$(kin token)\"" ...   # sign it too: see kin aauth fetch`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			svc, err := a.service()
			if err != nil {
				return err
			}
			t, err := svc.Token(cmd.Context())
			if err != nil {
				return err
			}
			switch {
			case a.jsonOut:
				return a.printJSON(t)
			case decode:
				return writeDecodedJWT(a.env.Stdout, t.Token)
			}
			_, err = fmt.Fprintln(a.env.Stdout, t.Token)
			return err
		}),
	}
	cmd.Flags().BoolVar(&decode, "decode", false, "print the header and claims as JSON")
	return cmd
}

// writeDecodedJWT prints a compact JWS's header and payload, indented.
func writeDecodedJWT(w io.Writer, tok string) error {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return kin.Errorf(kin.ECodeInvalid, "not a JWT")
	}
	out := map[string]json.RawMessage{}
	for i, name := range []string{"header", "claims"} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || !json.Valid(b) {
			return kin.Errorf(kin.ECodeInvalid, "the JWT's %s is not base64url JSON", name)
		}
		out[name] = b
	}
	b, err := json.MarshalIndent(struct {
		Header json.RawMessage `json:"header"`
		Claims json.RawMessage `json:"claims"`
	}{out["header"], out["claims"]}, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func (a *app) grantCommand() *cobra.Command {
	var req kin.GrantRequest
	var until string
	cmd := &cobra.Command{
		Use:   "grant ID --resource URL --scope S [--until T]",
		Short: "Let a top-level agent obtain auth tokens for a resource",
		Long: `Grant agent ID the scopes S (space-separated) at the resource URL, until T
(RFC 3339 or a duration such as 8h; default: no end). With the grant, the
agent obtains auth tokens from kin's /auth-token endpoint for itself and for
its sub-agents, which never hold a grant of their own (seed 004): a
sub-agent's authorization always goes through its parent.

Granting again replaces the grant; narrowing it revokes the auth tokens
issued under the old one. "kin ungrant" removes it.

Operator only. Exit status: 0 on success, 1 when refused (e.g. ID is a
sub-agent), 2 when the command line is wrong.`,
		Example: `  kin grant 3 --resource https://api.example --scope "data.read"
  kin grant 3 --resource http://127.0.0.1:8080 --scope "data.read data.write" --until 8h`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			req.Agent = id
			if until != "" {
				t, err := parseUntil(until, time.Now())
				if err != nil {
					return usageErrorf("--until: %v", err)
				}
				req.Until = t
			}
			g, err := svc.Grant(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(g)
			}
			return writeGrants(a.env.Stdout, []kin.Grant{*g})
		}),
	}
	cmd.Flags().StringVar(&req.Resource, "resource", "", "the resource's `URL`")
	cmd.Flags().StringVar(&req.Scope, "scope", "", "space-separated `scopes`")
	cmd.Flags().StringVar(&until, "until", "", "end of the grant: RFC 3339 `time` or a duration from now")
	cmd.MarkFlagRequired("resource")
	cmd.MarkFlagRequired("scope")
	return cmd
}

// parseUntil reads an RFC 3339 time or a duration from now.
func parseUntil(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%q is not in the future", s)
		}
		return now.Add(d).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-11-21T18:00:00Z) nor a duration (8h)", s)
	}
	return t.UTC(), nil
}

func writeGrants(w io.Writer, gs []kin.Grant) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tRESOURCE\tSCOPE\tUNTIL")
	for _, g := range gs {
		until := "-"
		if !g.Until.IsZero() {
			until = g.Until.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", g.Agent, g.Resource, g.Scope, until)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, g := range gs {
		if g.Revoked > 0 {
			fmt.Fprintf(w, "%d auth tokens issued under the old grant were revoked\n", g.Revoked)
		}
	}
	return nil
}

func (a *app) grantsCommand() *cobra.Command {
	var agent string
	cmd := &cobra.Command{
		Use:   "grants [--agent ID]",
		Short: "List the grants in force",
		Long: `List every grant (or agent ID's): the top-level agent, the resource, the
scopes and the end. Operator only.`,
		Example: `  kin grants
  kin grants --agent 3 --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			var id kin.AgentID
			if agent != "" {
				var err error
				if id, err = a.agentArg(cmd.Context(), agent); err != nil {
					return usageErrorf("--agent: %v", err)
				}
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			gs, err := svc.Grants(cmd.Context(), id)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(nonNil(gs))
			}
			return writeGrants(a.env.Stdout, gs)
		}),
	}
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent's grants (`ID`)")
	return cmd
}

func (a *app) ungrantCommand() *cobra.Command {
	var resource string
	cmd := &cobra.Command{
		Use:   "ungrant ID --resource URL",
		Short: "Remove a grant and revoke the auth tokens issued under it",
		Long: `Remove agent ID's grant for the resource URL. The next authorization of
any of its sub-agents for that resource fails at once, and every auth token
issued under the grant is revoked: "kin auth-tokens" lists them as revoked,
and resources that ask kin (token_status_endpoint) refuse them. Operator
only.`,
		Example:     `  kin ungrant 3 --resource https://api.example`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			g, err := svc.Ungrant(cmd.Context(), kin.UngrantRequest{Agent: id, Resource: resource})
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(g)
			}
			_, err = fmt.Fprintf(a.env.Stdout, "removed agent %d's grant for %s (%s); %d auth tokens revoked\n", g.Agent, g.Resource, g.Scope, g.Revoked)
			return err
		}),
	}
	cmd.Flags().StringVar(&resource, "resource", "", "the resource's `URL`")
	cmd.MarkFlagRequired("resource")
	return cmd
}

func (a *app) authTokensCommand() *cobra.Command {
	var f kin.AuthTokenFilter
	var agent string
	cmd := &cobra.Command{
		Use:   "auth-tokens [--agent ID] [--expired]",
		Short: "List the auth tokens kin issued, revoked ones included",
		Long: `List the auth tokens kin issued as the person server that have not expired
(with --expired, those too): each one's jti, the agent it is bound to, the
parent that obtained it, the resource and scope, and its state (active,
revoked with the reason, expired). An agent sees its own subtree's.`,
		Example: `  kin auth-tokens
  kin auth-tokens --agent 3 --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if agent != "" {
				var err error
				if f.Agent, err = a.agentArg(cmd.Context(), agent); err != nil {
					return usageErrorf("--agent: %v", err)
				}
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			ts, err := svc.AuthTokens(cmd.Context(), f)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(nonNil(ts))
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JTI\tAGENT\tPARENT\tRESOURCE\tSCOPE\tEXPIRES\tSTATE")
			for _, t := range ts {
				state := t.State
				if t.RevokedReason != "" {
					state += " (" + t.RevokedReason + ")"
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", t.JTI, t.Agent, t.Parent, t.Resource, t.Scope, t.ExpiresAt.Format(time.RFC3339), state)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().StringVar(&agent, "agent", "", "only tokens bound to or obtained by this agent (`ID`)")
	cmd.Flags().BoolVar(&f.Expired, "expired", false, "include expired tokens")
	return cmd
}

func (a *app) keysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Manage kin's own signing keys",
		Long: `kin signs agent tokens with its agent-provider key and auth tokens with its
person-server key, both Ed25519, kept 0600 under <home>/keys/. "kin keys
rotate" makes a new key current; the old one stays published in the JWKS
until every token it signed has expired.`,
		Example: `  kin keys rotate
  kin keys rotate --role person-server --json`,
		Args: cobra.NoArgs,
	}
	var role string
	rotate := &cobra.Command{
		Use:   "rotate [--role agent-provider|person-server]",
		Short: "Make a new signing key current",
		Long: `Make a new Ed25519 key current for the role (default agent-provider): new
tokens are signed with it, and the JWKS publishes it beside the old key,
which stays until the longest-lived token it signed has expired (25 h for
the agent provider, 2 h for the person server). Operator only.`,
		Example: `  kin keys rotate --role person-server`,
		Args:    cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			svc, err := a.service()
			if err != nil {
				return err
			}
			k, err := svc.RotateKeys(cmd.Context(), role)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(k)
			}
			_, err = fmt.Fprintf(a.env.Stdout, "%s key is now %s; published: %s\n", k.Role, k.KID, strings.Join(k.Published, ", "))
			return err
		}),
	}
	rotate.Flags().StringVar(&role, "role", kin.KeyRoleAgent, "whose key: agent-provider or person-server")
	cmd.AddCommand(rotate)
	return cmd
}

// agentSigner is the calling agent as an AAuth signer: its key from the
// session, its token from kin.
func (a *app) agentSigner(ctx context.Context) (*aauth.Agent, *kin.AgentToken, error) {
	svc, err := a.service()
	if err != nil {
		return nil, nil, err
	}
	t, err := svc.Token(ctx)
	if err != nil {
		return nil, nil, err
	}
	path := os.Getenv(ctxfs.EnvAgentKey)
	if path == "" {
		path = t.KeyPath
	}
	if path == "" {
		return nil, nil, kin.Errorf(kin.ECodeInvalid, "no agent key: $%s is not set and kin knows no session for this agent", ctxfs.EnvAgentKey)
	}
	key, err := aauth.LoadKey(path)
	if err != nil {
		return nil, nil, kin.Errorf(kin.ECodeInvalid, "agent key %s: %v", path, err)
	}
	// The token just fetched serves until a minute before it expires; kin
	// is asked again only after that.
	cur := t
	ag := &aauth.Agent{Key: key, Token: func(ctx context.Context) (string, error) {
		if time.Until(cur.ExpiresAt) > time.Minute {
			return cur.Token, nil
		}
		next, err := svc.Token(ctx)
		if err != nil {
			return "", err
		}
		cur = next
		return cur.Token, nil
	}}
	return ag, t, nil
}

func (a *app) aauthCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "aauth",
		Short: "Act as the calling agent in AAuth: signed requests and auth tokens",
		Long: `AAuth (seed 004, draft-hardt-oauth-aauth-protocol) from inside an agent:

  kin aauth fetch URL        a request signed with the agent's key; a resource
                             that wants an auth token answers 401 with a
                             resource token, which this prints (exit 3)
  kin aauth authorize ...    the parent's side of seed 004's flow: exchange a
                             sub-agent's resource token for an auth token
                             bound to the sub-agent's key

The sub-agent passes its resource token and its agent token ("kin token")
to its parent, e.g. with "kin send"; the parent runs "kin aauth authorize"
and hands the auth token back; the sub-agent calls again with
"kin aauth fetch --auth-token".`,
		Example: `  # in the sub-agent
  rt=$(kin aauth fetch http://127.0.0.1:8080/api/documents)
  kin send "$KIN_PARENT_ID" "$rt $(kin token)"
  # in the parent
  at=$(kin aauth authorize --resource-token "$rt" --subagent-token "$st")`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.aauthFetchCommand(), a.aauthAuthorizeCommand())
	return cmd
}

func (a *app) aauthFetchCommand() *cobra.Command {
	var method, authToken, data, contentType string
	cmd := &cobra.Command{
		Use:   "fetch URL [--auth-token T] [--method M] [--data BODY]",
		Short: "Send an HTTP request signed as the calling agent",
		Long: `Send a request to URL signed with the agent's key (RFC 9421), presenting its
agent token, or the auth token T with --auth-token. A 2xx answer's body goes
to stdout (exit 0). A 401 with "AAuth-Requirement: requirement=auth-token"
prints the resource token on stdout and exits 3: hand it to the parent. Any
other answer is an error (exit 1) that quotes the status and the
Signature-Error or problem the server gave.`,
		Example: `  rt=$(kin aauth fetch http://127.0.0.1:8080/api/documents)   # exit 3: a resource token
  kin aauth fetch http://127.0.0.1:8080/api/documents --auth-token "$at"`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			ag, _, err := a.agentSigner(cmd.Context())
			if err != nil {
				return err
			}
			var body io.Reader
			if data != "" {
				body = strings.NewReader(data)
			}
			req, err := http.NewRequestWithContext(cmd.Context(), method, args[0], body)
			if err != nil {
				return usageErrorf("%v", err)
			}
			if data != "" {
				req.Header.Set("Content-Type", contentType)
			}
			resp, err := ag.Do(req, authToken)
			if err != nil {
				return kin.Errorf(kin.ECodeUnavailable, "%v", err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
			if resp.StatusCode/100 == 2 {
				_, err = a.env.Stdout.Write(b)
				return err
			}
			if rt, ok := aauth.ResourceToken(resp.Header); ok {
				fmt.Fprintln(a.env.Stdout, rt)
				return &exitStatus{code: 3}
			}
			msg := fmt.Sprintf("%s %s: %s", method, args[0], resp.Status)
			if se := resp.Header.Get("Signature-Error"); se != "" {
				msg += "; Signature-Error: " + se
			}
			if len(b) > 0 {
				msg += "; " + strings.TrimSpace(string(b))
			}
			return kin.Errorf(kin.ECodeForbidden, "%s", msg)
		}),
	}
	cmd.Flags().StringVar(&authToken, "auth-token", "", "present this auth `token` instead of the agent token")
	cmd.Flags().StringVar(&method, "method", "GET", "the HTTP `method`")
	cmd.Flags().StringVar(&data, "data", "", "the request `body`")
	cmd.Flags().StringVar(&contentType, "content-type", "application/json", "the body's `type`")
	return cmd
}

func (a *app) aauthAuthorizeCommand() *cobra.Command {
	var req aauth.AuthTokenRequest
	cmd := &cobra.Command{
		Use:   "authorize --resource-token RT [--subagent-token ST]",
		Short: "Obtain an auth token from kin, for a sub-agent or for yourself",
		Long: `The parent's side of seed 004's parent-mediated authorization: send kin's
/auth-token endpoint (advertised in /.well-known/aauth-person.json) the
sub-agent's resource token RT and agent token ST, signed with this agent's
key. kin checks the signature, that ST names this agent as its parent, that
RT is bound to ST's key, and this agent's grant for RT's resource and scope,
then issues an auth token bound to the sub-agent's key. Without ST the token
is for this agent itself. Prints the auth token.

A sub-agent cannot run this: kin refuses requests signed by sub-agents.`,
		Example: `  at=$(kin aauth authorize --resource-token "$rt" --subagent-token "$st")`,
		Args:    cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if req.ResourceToken == "" {
				return usageErrorf("--resource-token is required")
			}
			ag, t, err := a.agentSigner(cmd.Context())
			if err != nil {
				return err
			}
			res, err := ag.RequestAuthToken(cmd.Context(), t.Issuer, req)
			if err != nil {
				var p *aauth.Problem
				var se *aauth.SignatureError
				switch {
				case errors.As(err, &p):
					return kin.Errorf(kin.ECodeForbidden, "kin refused the auth token: %s: %s", p.Code, p.Detail)
				case errors.As(err, &se):
					return kin.Errorf(kin.ECodeUnauthorized, "kin refused the signature: %s: %s", se.Code, se.Detail)
				}
				return kin.Errorf(kin.ECodeUnavailable, "%v", err)
			}
			if a.jsonOut {
				return a.printJSON(res)
			}
			_, err = fmt.Fprintln(a.env.Stdout, res.AuthToken)
			return err
		}),
	}
	cmd.Flags().StringVar(&req.ResourceToken, "resource-token", "", "the resource `token` the sub-agent got")
	cmd.Flags().StringVar(&req.SubagentToken, "subagent-token", "", "the sub-agent's agent `token`")
	cmd.Flags().StringVar(&req.PresentedToken, "presented-token", "", "the `token` the sub-agent presented to the resource (optional)")
	return cmd
}
