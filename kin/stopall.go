package kin

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
)

// StopAtOnce is how many stops StopAll has in flight at a time.
const StopAtOnce = 16

// StopAll stops each of ids (req's ID aside; one named twice is stopped
// once) with its owned subtree, side by side, StopAtOnce at a time (what
// "kin stop" does with several agents), and returns every agent stopped,
// each once, by id. An id whose
// stop failed is an error unless another's stop ended it; the error names
// every such agent, and has the first's code (in the order of ids). With
// one id, the error is that Stop's own.
//
// Once ctx is done no more stops are sent, and the error (ECodeUnavailable)
// says how many were: the daemon finishes a stop it received even when its
// caller goes away, so those may still end their agents.
func StopAll(ctx context.Context, svc RunnerService, ids []AgentID, req StopRequest) ([]*Agent, error) {
	seen := make(map[AgentID]bool, len(ids))
	ids = slices.DeleteFunc(slices.Clone(ids), func(id AgentID) bool {
		dup := seen[id]
		seen[id] = true
		return dup
	})
	lists := make([][]*Agent, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, StopAtOnce)
	var wg sync.WaitGroup
	sent := 0
send:
	for i, id := range ids {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break send
		}
		sent++
		wg.Go(func() {
			defer func() { <-sem }()
			r := req
			r.ID = id
			lists[i], errs[i] = svc.Stop(ctx, r)
		})
	}
	wg.Wait()
	byID := map[AgentID]*Agent{}
	for _, l := range lists {
		for _, ag := range l {
			byID[ag.ID] = ag
		}
	}
	stopped := make([]*Agent, 0, len(byID))
	for _, ag := range byID {
		stopped = append(stopped, ag)
	}
	slices.SortFunc(stopped, func(x, y *Agent) int { return cmp.Compare(x.ID, y.ID) })
	if ctx.Err() != nil {
		return stopped, Errorf(ECodeUnavailable, "interrupted: the stops of %d of %d agents were sent, and may still end them (%d known stopped)",
			sent, len(ids), len(stopped))
	}
	if len(ids) == 1 {
		return stopped, errs[0]
	}
	// The failures, those with one cause together, in the order of ids.
	type cause struct {
		code ErrorCode
		msg  string
		ids  []AgentID
	}
	var causes []*cause
	for i, err := range errs {
		if err == nil || byID[ids[i]] != nil {
			continue
		}
		code, msg := ErrorCodeOf(err), messageOf(err)
		k := slices.IndexFunc(causes, func(c *cause) bool { return c.code == code && c.msg == msg })
		if k < 0 {
			causes = append(causes, &cause{code: code, msg: msg})
			k = len(causes) - 1
		}
		causes[k].ids = append(causes[k].ids, ids[i])
	}
	if len(causes) == 0 {
		return stopped, nil
	}
	parts := make([]string, len(causes))
	n := 0
	for i, c := range causes {
		n += len(c.ids)
		parts[i] = c.msg
		if len(c.ids) > 1 || !strings.Contains(c.msg, "agent "+c.ids[0].String()) {
			parts[i] = agentList(c.ids) + ": " + c.msg
		}
		if len(causes) > 1 {
			parts[i] += " [" + string(c.code) + "]"
		}
	}
	if n == 1 {
		return stopped, Errorf(causes[0].code, "%s", parts[0])
	}
	return stopped, Errorf(causes[0].code, "%d agents not stopped: %s", n, strings.Join(parts, "; "))
}

// agentList is "agent 7" or "agents 7, 9, 12".
func agentList(ids []AgentID) string {
	if len(ids) == 1 {
		return "agent " + ids[0].String()
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return "agents " + strings.Join(s, ", ")
}

// messageOf is err's message without its code.
func messageOf(err error) string {
	var ke *Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return err.Error()
}
