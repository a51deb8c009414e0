package httpapi

import (
	"net/url"
	"strconv"

	"github.com/kin-agents/kin/kin"
)

// The query strings the client sends, each the inverse of its Parse
// function here (the fuzzers check that parsing what these encode gives
// back what was encoded), so that both ends of the wire live in one place.

// AgentFilterQuery is GET /v1/agents's query for f (ParseAgentFilter).
func AgentFilterQuery(f kin.AgentFilter) url.Values {
	q := url.Values{}
	if f.Status != "" {
		q.Set("status", string(f.Status))
	}
	if f.State != "" {
		q.Set("state", string(f.State))
	}
	if f.Role != "" {
		q.Set("role", f.Role)
	}
	if f.HasParent || f.Parent != 0 {
		q.Set("parent", f.Parent.String())
	}
	if f.Responsible != "" {
		q.Set("responsible", f.Responsible)
	}
	if f.Name != "" {
		q.Set("name", f.Name)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// EventQuery is GET /v1/events's query for f (ParseEventQuery).
func EventQuery(f kin.EventFilter, follow bool) url.Values {
	q := url.Values{}
	if f.Agent != 0 {
		q.Set("agent", f.Agent.String())
	}
	if f.Subject {
		q.Set("subject", "true")
	}
	if f.Since != 0 {
		q.Set("since", strconv.FormatInt(f.Since, 10))
	}
	if f.Before != 0 {
		q.Set("before", strconv.FormatInt(f.Before, 10))
	}
	for _, t := range f.Types {
		q.Add("type", t)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if follow {
		q.Set("follow", "true")
	}
	return q
}

// LogsQuery is GET /v1/agents/{id}/logs's query for req (ParseLogsQuery).
func LogsQuery(req kin.LogsRequest) url.Values {
	q := url.Values{}
	if req.Offset != 0 {
		q.Set("offset", strconv.FormatInt(req.Offset, 10))
	}
	if req.Tail != 0 {
		q.Set("tail", strconv.FormatInt(req.Tail, 10))
	}
	if req.Follow {
		q.Set("follow", "true")
	}
	return q
}

// InboxQuery is GET /v1/inbox's query for req (ParseInboxQuery).
func InboxQuery(req kin.InboxRequest) url.Values {
	q := url.Values{}
	if req.Agent != 0 {
		q.Set("agent", req.Agent.String())
	}
	if req.Since != 0 {
		q.Set("since", strconv.FormatInt(req.Since, 10))
	}
	if req.Follow {
		q.Set("follow", "true")
	}
	return q
}
