package runner

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/kin-agents/kin/kin"
)

// logPoll is how often a followed log is checked for growth when no event
// woke the follower.
const logPoll = 100 * time.Millisecond

// Logs streams an agent's captured stdout and stderr from req.Offset. With
// Follow it goes on until the agent has ended and everything was sent.
func (run *Runner) Logs(ctx context.Context, req kin.LogsRequest, fn func([]byte) error) error {
	if err := run.authorize(ctx, req.ID, true); err != nil {
		return err
	}
	if req.Offset < 0 {
		return kin.Errorf(kin.ECodeInvalid, "offset %d is negative", req.Offset)
	}
	if req.Tail < 0 {
		return kin.Errorf(kin.ECodeInvalid, "tail %d is negative", req.Tail)
	}
	a, err := run.store.AgentGetByID(ctx, req.ID)
	if err != nil {
		return run.agentError(err, req.ID)
	}
	if len(a.Command) == 0 {
		return kin.Errorf(kin.ECodeInvalid, "agent %d was registered without a process: it has no log", req.ID)
	}
	buf := make([]byte, 32<<10)
	offset := req.Offset
	if req.Tail > 0 {
		// The last Tail bytes of what is there now (the dashboard's log tail).
		if fi, err := os.Stat(run.logPath(req.ID)); err == nil {
			offset = max(offset, fi.Size()-req.Tail)
		}
	}
	if req.Follow {
		// Whether a restarted daemon's agent still runs, and so writes
		// more, is known once it is checked.
		if err := run.awaitReconciled(ctx, req.ID); err != nil {
			return err
		}
	}
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for {
		wake := run.store.Wait()
		ended := run.runtimeOf(req.ID) == nil // no process: nothing more will be written
		if f == nil {
			f, err = os.Open(run.logPath(req.ID))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if f != nil {
			for {
				n, err := f.ReadAt(buf, offset)
				if n > 0 {
					offset += int64(n)
					if ferr := fn(buf[:n]); ferr != nil {
						return ferr
					}
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
			}
		}
		if !req.Follow || ended {
			return nil
		}
		t := time.NewTimer(logPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-run.closing:
			t.Stop()
			return kin.Errorf(kin.ECodeUnavailable, "the daemon is shutting down")
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}
