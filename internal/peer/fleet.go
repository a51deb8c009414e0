package peer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Fleet calls the other hosts of the fleet, at the addresses their
// daemons recorded in the store's hosts table.
type Fleet struct {
	auth  *Auth
	hosts func(ctx context.Context) ([]store.HostRow, error)
	clock func() time.Time
	http  *http.Client
}

// NewFleet calls peers as auth's host; hosts lists the fleet's hosts
// (store.Reader.HostList); clock nil is time.Now.
func NewFleet(auth *Auth, hosts func(ctx context.Context) ([]store.HostRow, error), clock func() time.Time) *Fleet {
	if clock == nil {
		clock = time.Now
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 16
	tr.Proxy = nil // hosts of one fleet reach one another directly
	tr.ResponseHeaderTimeout = 30 * time.Second
	return &Fleet{auth: auth, hosts: hosts, clock: clock, http: &http.Client{Transport: transport{auth: auth, base: tr}}}
}

// Close closes idle connections to peers.
func (f *Fleet) Close() { f.http.CloseIdleConnections() }

// reach returns host's row and its API's address, or why what (an
// agent's log, ...) cannot be asked of it: not a host of the fleet, no
// HTTP API, or its lease released or expired.
func (f *Fleet) reach(ctx context.Context, host, what string) (store.HostRow, error) {
	rows, err := f.hosts(ctx)
	if err != nil {
		return store.HostRow{}, store.KinError(err)
	}
	for _, r := range rows {
		if r.Name != host {
			continue
		}
		now := f.clock()
		switch {
		case !r.Live(now):
			return r, kin.Errorf(kin.ECodeUnavailable, "%s is on host %s, which is down: its lease %s", what, host, LeaseState(r, now))
		case r.Address == "":
			return r, kin.Errorf(kin.ECodeUnavailable, "%s is on host %s, which serves no HTTP API (its kin serve runs with --http off): ask there", what, host)
		}
		return r, nil
	}
	return store.HostRow{}, kin.Errorf(kin.ECodeUnavailable, "%s is on host %q, which is not a host of the fleet (kin hosts)", what, host)
}

// LeaseState says how a host's lease stands at now, for a message.
func LeaseState(r store.HostRow, now time.Time) string {
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case r.LeaseUntil.IsZero():
		return "was released at a clean stop (last renewed " + at(r.RenewedAt) + ")"
	case r.Live(now):
		return "is live until " + at(r.LeaseUntil)
	}
	return fmt.Sprintf("expired %s ago (last renewed %s): its daemon is down or cut off from the store", now.Sub(r.LeaseUntil).Round(time.Second), at(r.RenewedAt))
}

// get asks host's API for path (and query q): the response when it
// answered 2xx, or the error it answered or why it did not.
func (f *Fleet) get(ctx context.Context, host, what, path string, q url.Values) (*http.Response, error) {
	row, err := f.reach(ctx, host, what)
	if err != nil {
		return nil, err
	}
	u := "http://" + row.Address + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ForHost(ctx, host), "GET", u, nil)
	if err != nil {
		return nil, kin.Errorf(kin.ECodeInternal, "host %s's address %q: %v", host, row.Address, err)
	}
	resp, err := f.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, kin.Errorf(kin.ECodeUnavailable, "%s is on host %s, which did not answer at %s (%v); its lease %s", what, host, row.Address, err, LeaseState(row, f.clock()))
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var b httpapi.ErrorBody
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&b); err != nil || b.Code == "" {
			return nil, kin.Errorf(kin.ECodeUnavailable, "host %s answered %s for %s", host, resp.Status, what)
		}
		return nil, &kin.Error{Code: b.Code, Message: "host " + host + ": " + b.Message, RetryAfter: b.RetryAfter}
	}
	return resp, nil
}

// Logs streams agent req.ID's log from host, the host that runs it, as
// that host's Logs does (kin.RunnerService).
func (f *Fleet) Logs(ctx context.Context, host string, req kin.LogsRequest, fn func([]byte) error) error {
	what := fmt.Sprintf("agent %d's log", req.ID)
	resp, err := f.get(ctx, host, what, "/v1/agents/"+req.ID.String()+"/logs", httpapi.LogsQuery(req))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := httpapi.ReadLogStream(ctx, resp.Body, fn, func(err error) error {
		return kin.Errorf(kin.ECodeUnavailable, "%s: the stream from host %s broke: %v", what, host, err)
	}); err != nil {
		return err
	}
	if t := resp.Trailer.Get(httpapi.LogsErrorTrailer); t != "" {
		var b httpapi.ErrorBody
		if json.Unmarshal([]byte(t), &b) != nil || b.Code == "" {
			return kin.Errorf(kin.ECodeInternal, "host %s ended %s with an unreadable error: %s", host, what, t)
		}
		return &kin.Error{Code: b.Code, Message: "host " + host + ": " + b.Message}
	}
	return nil
}

// Handoff reads agent id's checked result from host, which runs it: a tar
// of result.md, refs.jsonl and artifact/ (runner.WriteHandoff's). A
// stream cut short fails the reader (the chunked body's end is missing).
func (f *Fleet) Handoff(ctx context.Context, host string, id kin.AgentID) (io.ReadCloser, error) {
	resp, err := f.get(ctx, host, fmt.Sprintf("agent %d's result", id), "/v1/agents/"+id.String()+"/handoff", nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
