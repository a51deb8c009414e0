package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/kin-agents/kin/kin"
)

func (s *Server) policy(w http.ResponseWriter, r *http.Request) error {
	return s.withID(w, r, func(ctx context.Context, id kin.AgentID) (any, error) { return s.svc.Policy(ctx, id) })
}

// authorize answers 200 whether the tool is allowed or not: a denial is
// the answer asked for, not a failure.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) error {
	var req kin.AuthorizeRequest
	if err := DecodeJSON(r.Body, &req); err != nil {
		return err
	}
	d, err := s.svc.Authorize(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, d)
}

// ParseExplainQuery reads what GET /v1/agents/{id}/explain asks about:
// exactly one of a tool and a path.
func ParseExplainQuery(q map[string][]string) (tool, path string, err error) {
	err = eachQueryParam(q, []string{"tool", "path"}, "", func(key string, vals []string) error {
		switch key {
		case "tool":
			if tool = vals[0]; tool == "" {
				return kin.Errorf(kin.ECodeInvalid, "tool is empty: name a tool, e.g. tool=exec")
			}
		case "path":
			if path = vals[0]; path == "" {
				return kin.Errorf(kin.ECodeInvalid, "path is empty: name a path, e.g. path=/work")
			}
		}
		return nil
	})
	if err != nil {
		return "", "", err
	}
	switch {
	case tool != "" && path != "":
		return "", "", kin.Errorf(kin.ECodeInvalid, "give tool or path, not both: one explanation answers one question")
	case tool == "" && path == "":
		return "", "", kin.Errorf(kin.ECodeInvalid, "say what to explain: tool=NAME or path=PATH")
	}
	return tool, path, nil
}

func (s *Server) explain(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	tool, path, err := ParseExplainQuery(r.URL.Query())
	if err != nil {
		return err
	}
	e, err := s.svc.Explain(r.Context(), kin.ExplainRequest{Agent: id, Tool: tool, Path: path})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, e)
}

func (s *Server) usage(w http.ResponseWriter, r *http.Request) error {
	var req kin.UsageRequest
	if err := DecodeJSON(r.Body, &req); err != nil {
		return err
	}
	sp, err := s.svc.Usage(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sp)
}

// PromoteBody is the body of POST /v1/agents/{id}/promote.
type PromoteBody struct {
	Stage string `json:"stage"`
}

func (s *Server) promote(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var body PromoteBody
	if err := DecodeJSON(r.Body, &body); err != nil {
		return err
	}
	a, err := s.svc.Promote(r.Context(), kin.PromoteRequest{Agent: id, Stage: body.Stage})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, a)
}

// readFile answers the file's bytes as they are.
func (s *Server) readFile(w http.ResponseWriter, r *http.Request) error {
	var req kin.ReadRequest
	if err := DecodeJSON(r.Body, &req); err != nil {
		return err
	}
	data, err := s.svc.ReadFile(r.Context(), req)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(data)
	return err
}

func (s *Server) send(w http.ResponseWriter, r *http.Request) error {
	var req kin.SendRequest
	if err := DecodeJSON(r.Body, &req); err != nil {
		return err
	}
	m, err := s.svc.Send(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, m)
}

// ParseInboxQuery reads the query parameters of GET /v1/inbox.
func ParseInboxQuery(q map[string][]string) (req kin.InboxRequest, err error) {
	err = eachQueryParam(q, []string{"agent", "since", "follow"}, "", func(key string, vals []string) error {
		v := vals[0]
		switch key {
		case "agent":
			if req.Agent, err = kin.ParseAgentID(v); err != nil {
				return err
			}
		case "since":
			req.Since, err = querySeq(key, v)
		case "follow":
			req.Follow, err = queryBool(key, v)
		}
		return err
	})
	return req, err
}

// inbox streams the messages sent to an agent as NDJSON, one kin.Message
// a line, flushing each, with an empty line as keep-alive while a follower
// waits. Unlike the event stream, the answer starts only with the first
// message, the first keep-alive or the end of the stream: what the daemon
// refuses at once (no such agent, not the caller's, the operator naming
// none) is then an ordinary error answer with its status. An error after
// the answer has started comes in the Kin-Error trailer, as in a log stream.
func (s *Server) inbox(w http.ResponseWriter, r *http.Request) error {
	req, err := ParseInboxQuery(r.URL.Query())
	if err != nil {
		return err
	}
	if req.Follow {
		release, err := s.openStream(w, r)
		if err != nil {
			return err
		}
		defer release()
	}
	// A follower waits for as long as it likes.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	rc := http.NewResponseController(w)
	var (
		mu      sync.Mutex
		started bool
	)
	// write sends line (nil: only the headers), starting the answer first.
	write := func(line []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			started = true
			h := w.Header()
			h.Set("Content-Type", "application/x-ndjson")
			h.Set("Cache-Control", "no-store")
			h.Set("Trailer", LogsErrorTrailer)
			w.WriteHeader(http.StatusOK)
		}
		if line != nil {
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
		return rc.Flush()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if req.Follow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(s.KeepAlive)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					write([]byte("\n"))
				case <-stop:
					return
				}
			}
		}()
	}
	err = s.svc.Inbox(r.Context(), req, func(m kin.Message) error {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		return write(append(b, '\n'))
	})
	// The keep-alive goroutine must be gone before the handler returns:
	// net/http finishes the response then, and a late write would race it.
	close(stop)
	wg.Wait()
	if !started {
		if err != nil {
			return err
		}
		return write(nil) // no messages
	}
	if err != nil && r.Context().Err() == nil && !errors.Is(err, context.Canceled) {
		if kin.ErrorCodeOf(err) == kin.ECodeInternal {
			s.log.Error("inbox stream failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		w.Header().Set(LogsErrorTrailer, string(mustJSON(errorBody(err))))
	}
	return nil
}
