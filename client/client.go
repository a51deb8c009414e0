// Package client is kin's Go SDK: a kin.Service that talks to a running
// `kin serve` over its Unix socket or its HTTP address. The kin CLI uses
// nothing else.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/kin"
)

// Client is a kin.Service over HTTP.
type Client struct {
	base  string // scheme://host, no trailing slash
	token string
	http  *http.Client
	where string // for error messages
	actAs string
}

// ActingAs returns a client that acts for the agent ref names, by id or by
// the name of a live agent (kin.HeaderActAs): the daemon answers it as
// that agent, on its own subtree only. Only the operator may do this. It
// shares c's connections.
func (c *Client) ActingAs(ref string) *Client {
	cc := *c
	cc.actAs = ref
	return &cc
}

var _ kin.Service = (*Client)(nil)

// Config says how to reach the daemon: a Unix socket, or an HTTP address
// with the operator token.
type Config struct {
	Socket string // path of kin.sock
	Addr   string // host:port or http://host:port
	Token  string
}

// New returns a client for cfg. It does not connect until the first call.
func New(cfg Config) (*Client, error) {
	switch {
	case cfg.Socket != "":
		sock := cfg.Socket
		tr := &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
			MaxIdleConnsPerHost: 64,
		}
		return &Client{base: "http://kin", http: &http.Client{Transport: tr}, where: "socket " + sock}, nil
	case cfg.Addr != "":
		base := cfg.Addr
		if !strings.Contains(base, "://") {
			base = "http://" + base
		}
		u, err := url.Parse(base)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("KIN_ADDR %q is not host:port or an http(s) URL", cfg.Addr)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		return &Client{base: strings.TrimRight(u.String(), "/"), token: cfg.Token, http: &http.Client{Transport: tr}, where: u.Host}, nil
	}
	return nil, errors.New("client: neither a socket nor an address to reach kin")
}

// FromEnv finds the daemon the way the CLI does: KIN_SOCKET if set (the
// agent's own socket, which kin puts in every agent's environment: the
// daemon knows the caller by it), else KIN_ADDR (+ KIN_TOKEN), else the
// operator socket in home (when home is "": KIN_HOME, else kin.RootHome
// for root, else ~/.kin).
func FromEnv(home string) (*Client, error) {
	if sock := os.Getenv("KIN_SOCKET"); sock != "" {
		return New(Config{Socket: sock})
	}
	if addr := os.Getenv("KIN_ADDR"); addr != "" {
		return New(Config{Addr: addr, Token: os.Getenv("KIN_TOKEN")})
	}
	if home == "" {
		h, err := kin.DefaultHome()
		if err != nil {
			return nil, err
		}
		home = h
	}
	return New(Config{Socket: filepath.Join(home, "kin.sock")})
}

// Close releases idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("kin at %s sent an unreadable answer to %s %s: %w", c.where, method, path, err)
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path string, body any, accept string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.actAs != "" {
		req.Header.Set(kin.HeaderActAs, c.actAs)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &kin.Error{Code: kin.ECodeUnavailable, Message: fmt.Sprintf("cannot reach kin at %s (is `kin serve` running?): %v", c.where, unwrapURLError(err))}
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// decodeError turns an error response back into the *kin.Error the daemon
// sent; a body that is not one (a proxy's page) still yields a kin error.
func decodeError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e errorBody
	if json.Unmarshal(data, &e) == nil && e.Code != "" {
		return e.err()
	}
	code := kin.ECodeInternal
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		code = kin.ECodeUnauthorized
	case http.StatusForbidden:
		code = kin.ECodeForbidden
	case http.StatusNotFound:
		code = kin.ECodeNotFound
	case http.StatusBadRequest:
		code = kin.ECodeInvalid
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		// A proxy's 504 means kin did not answer it in time; kin's own
		// timeouts come with a body.
		code = kin.ECodeUnavailable
	}
	return &kin.Error{Code: code, Message: fmt.Sprintf("HTTP %s: %s", resp.Status, strings.TrimSpace(string(data)))}
}

// errorBody is an error answer as the daemon sends it: a kin.Error, and
// for permission_escalation every item that exceeds the parent.
type errorBody struct {
	kin.Error
	Excess []kin.Excess `json:"excess,omitempty"`
}

// err is the error the daemon raised: a *kin.EscalationError for
// permission_escalation (errors.As finds the *kin.Error inside it too),
// else a *kin.Error.
func (b *errorBody) err() error {
	if b.Code == kin.ECodeEscalation {
		return &kin.EscalationError{Err: b.Error, Excess: b.Excess}
	}
	e := b.Error
	return &e
}

// trailerError is the error a stream's Kin-Error trailer carries.
func trailerError(stream, trailer string) error {
	var e errorBody
	if json.Unmarshal([]byte(trailer), &e) != nil || e.Code == "" {
		return &kin.Error{Code: kin.ECodeInternal, Message: "kin ended the " + stream + " with an unreadable error: " + trailer}
	}
	return e.err()
}

func (c *Client) Register(ctx context.Context, req kin.RegisterRequest) (*kin.Agent, error) {
	var a kin.Agent
	if err := c.do(ctx, "POST", "/v1/agents", req, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

func (c *Client) Agent(ctx context.Context, id kin.AgentID) (*kin.Agent, error) {
	var a kin.Agent
	if err := c.do(ctx, "GET", "/v1/agents/"+id.String(), nil, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

func (c *Client) Agents(ctx context.Context, f kin.AgentFilter) ([]*kin.Agent, error) {
	var out []*kin.Agent
	return out, c.do(ctx, "GET", "/v1/agents"+query(httpapi.AgentFilterQuery(f)), nil, &out)
}

func query(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

func (c *Client) Children(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error) {
	var out []*kin.Agent
	return out, c.do(ctx, "GET", "/v1/agents/"+id.String()+"/children", nil, &out)
}

func (c *Client) Ancestors(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error) {
	var out []*kin.Agent
	return out, c.do(ctx, "GET", "/v1/agents/"+id.String()+"/ancestors", nil, &out)
}

func (c *Client) Tree(ctx context.Context, id kin.AgentID) ([]*kin.TreeNode, error) {
	path := "/v1/tree"
	if id != 0 {
		path = "/v1/agents/" + id.String() + "/tree"
	}
	// A compact form (httpapi.TreeRowsType, else httpapi.TreeColumnsType
	// from a daemon that serves the forest only in that one) when the
	// daemon has it; a daemon that predates them ignores the Accept and
	// sends nested JSON.
	resp, err := c.send(ctx, "GET", path, nil, httpapi.TreeRowsType+", "+httpapi.TreeColumnsType+";q=0.9, application/json;q=0.5")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := httpapi.DecodeTree(resp.Header.Get("Content-Type"), resp.Body)
	if err != nil {
		return nil, fmt.Errorf("kin at %s sent an unreadable answer to GET %s: %w", c.where, path, err)
	}
	return out, nil
}

func (c *Client) SetStatus(ctx context.Context, req kin.StatusRequest) ([]*kin.Agent, error) {
	body := map[string]any{"action": req.Action}
	if req.Cascade {
		body["cascade"] = true
	}
	if req.Reason != "" {
		body["reason"] = req.Reason
	}
	var out []*kin.Agent
	return out, c.do(ctx, "POST", "/v1/agents/"+req.ID.String()+"/status", body, &out)
}

func eventQuery(f kin.EventFilter, follow bool) string {
	return query(httpapi.EventQuery(f, follow))
}

func (c *Client) Events(ctx context.Context, f kin.EventFilter) ([]kin.Event, error) {
	var out []kin.Event
	return out, c.do(ctx, "GET", "/v1/events"+eventQuery(f, false), nil, &out)
}

// FollowEvents reads the live stream (JSON lines) until ctx ends, fn fails or
// the daemon ends the stream.
func (c *Client) FollowEvents(ctx context.Context, f kin.EventFilter, fn func(kin.Event) error) error {
	resp, err := c.send(ctx, "GET", "/v1/events"+eventQuery(f, true), nil, "application/x-ndjson")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue // a keep-alive
		}
		var e kin.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("kin sent an unreadable event: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return &kin.Error{Code: kin.ECodeUnavailable, Message: fmt.Sprintf("the event stream from %s broke: %v", c.where, err)}
	}
	if f.Limit > 0 {
		return nil
	}
	return &kin.Error{Code: kin.ECodeUnavailable, Message: "kin ended the event stream (the daemon is shutting down)"}
}

func (c *Client) Governor(ctx context.Context) (*kin.GovernorInfo, error) {
	var g kin.GovernorInfo
	if err := c.do(ctx, "GET", "/v1/governor", nil, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

func (c *Client) SetGovernor(ctx context.Context, key, value string) (*kin.GovernorInfo, error) {
	var g kin.GovernorInfo
	if err := c.do(ctx, "POST", "/v1/governor/settings", map[string]string{"key": key, "value": value}, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

func (c *Client) Status(ctx context.Context) (*kin.DaemonStatus, error) {
	var s kin.DaemonStatus
	if err := c.do(ctx, "GET", "/v1/status", nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
