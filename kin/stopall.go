package kin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// StopAtOnce is how many stops StopAll has in flight at a time.
const StopAtOnce = 16

// StopAll stops each of ids (req's ID aside) with its owned subtree, side
// by side, StopAtOnce at a time (what "kin stop" does with several
// agents), and returns every agent stopped, each once, by id. An id whose
// stop failed is an error unless another's stop ended it; where several
// failed, the error has the first's code (in the order of ids) and names
// them all.
func StopAll(ctx context.Context, svc RunnerService, ids []AgentID, req StopRequest) ([]*Agent, error) {
	lists := make([][]*Agent, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, StopAtOnce)
	var wg sync.WaitGroup
	for i, id := range ids {
		sem <- struct{}{}
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
	var failed []error
	for i, err := range errs {
		if err != nil && byID[ids[i]] == nil {
			failed = append(failed, err)
		}
	}
	stopped := make([]*Agent, 0, len(byID))
	for _, ag := range byID {
		stopped = append(stopped, ag)
	}
	slices.SortFunc(stopped, func(x, y *Agent) int { return cmp.Compare(x.ID, y.ID) })
	switch len(failed) {
	case 0:
		return stopped, nil
	case 1:
		return stopped, failed[0] // the daemon's own error: it names the agent
	}
	// Each with its code, the first's the whole error's.
	parts := make([]string, len(failed))
	for i, err := range failed {
		parts[i] = fmt.Sprintf("%s [%s]", messageOf(err), ErrorCodeOf(err))
	}
	return stopped, Errorf(ErrorCodeOf(failed[0]), "%d agents not stopped: %s", len(failed), strings.Join(parts, "; "))
}

// messageOf is err's message without its code.
func messageOf(err error) string {
	var ke *Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return err.Error()
}
