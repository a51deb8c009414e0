package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/kin-agents/kin/kin"
)

// LogsErrorTrailer is the trailer of a log stream that carries, as a JSON
// kin.Error, the error that ended the stream after its 200 answer was sent.
// The client SDK reads it under the same name.
const LogsErrorTrailer = "Kin-Error"

// ReadLogStream calls fn with each chunk of a log stream's body as it
// arrives, until its end (nil), fn's error, or a read that fails: ctx's
// error when ctx is done, else broke(err) (the caller names the stream).
// The stream's own error, if the server ended it with one, is then in the
// response's LogsErrorTrailer.
func ReadLogStream(ctx context.Context, body io.Reader, fn func([]byte) error, broke func(error) error) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if ferr := fn(buf[:n]); ferr != nil {
				return ferr
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return broke(err)
		}
	}
}

func (s *Server) spawn(w http.ResponseWriter, r *http.Request) error {
	var req kin.SpawnRequest
	if err := DecodeJSON(r.Body, &req); err != nil {
		return err
	}
	a, err := s.svc.Spawn(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/agents/"+a.ID.String())
	return writeJSON(w, http.StatusCreated, a)
}

// StopBody is the body of POST /v1/agents/{id}/stop. Without Grace each
// agent gets its own grace between SIGTERM and SIGKILL; "0s" kills at once.
type StopBody struct {
	Grace *kin.Duration `json:"grace,omitempty"`
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var body StopBody
	if err := decodeOptionalJSON(r.Body, &body); err != nil {
		return err
	}
	out, err := s.svc.Stop(r.Context(), kin.StopRequest{ID: id, Grace: body.Grace})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, nonNil(out))
}

// decodeOptionalJSON is DecodeJSON for a body that may be left out
// altogether (`curl -X POST` with no data); what is sent is held to the
// same rules.
func decodeOptionalJSON(r io.Reader, v any) error {
	data, err := io.ReadAll(io.LimitReader(r, MaxBodySize+1))
	if err != nil {
		return kin.Errorf(kin.ECodeInvalid, "reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	return DecodeJSON(bytes.NewReader(data), v)
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) error {
	var req kin.HeartbeatRequest
	if err := DecodeJSON(r.Body, &req); err != nil {
		return err
	}
	a, err := s.svc.Heartbeat(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, a)
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request) error {
	a, err := s.svc.Whoami(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, a) // null for the operator
}

// ParseLogsQuery reads the query parameters of an agent's log stream.
func ParseLogsQuery(q map[string][]string) (offset, tail int64, follow bool, err error) {
	err = eachQueryParam(q, []string{"offset", "tail", "follow"}, "", func(key string, vals []string) error {
		v := vals[0]
		switch key {
		case "offset":
			offset, err = queryCount(key, v, "a whole number of bytes")
		case "tail":
			tail, err = queryCount(key, v, "a whole number of bytes")
		case "follow":
			follow, err = queryBool(key, v)
		}
		return err
	})
	if err != nil {
		return 0, 0, false, err
	}
	return offset, tail, follow, nil
}

// logs streams an agent's captured output as it is, flushing each chunk.
// Headers go out at once so that a follower of a quiet agent knows it is
// connected; an error after that comes in the Kin-Error trailer.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	offset, tail, follow, err := ParseLogsQuery(r.URL.Query())
	if err != nil {
		return err
	}
	// A missing agent, or one the caller may not see, is a plain error
	// answer rather than an empty stream.
	if _, err := s.svc.Agent(r.Context(), id); err != nil {
		return err
	}
	release, err := s.openStream(w, r)
	if err != nil {
		return err
	}
	defer release()
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Trailer", LogsErrorTrailer)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return nil // the client went away
	}
	err = s.svc.Logs(r.Context(), kin.LogsRequest{ID: id, Offset: offset, Tail: tail, Follow: follow}, func(b []byte) error {
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil && r.Context().Err() == nil {
		code := kin.ErrorCodeOf(err)
		if code == kin.ECodeInternal {
			s.log.Error("log stream failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		h.Set(LogsErrorTrailer, string(mustJSON(&kin.Error{Code: code, Message: kin.ErrorMessageOf(err)})))
	}
	return nil
}

// resources answers a running agent's cgroup accounting.
func (s *Server) resources(w http.ResponseWriter, r *http.Request) error {
	return s.withID(w, r, func(ctx context.Context, id kin.AgentID) (any, error) { return s.svc.Resources(ctx, id) })
}
