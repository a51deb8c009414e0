package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/kin-agents/kin/kin"
)

// WaitBody is the body of POST /v1/agents/{id}/wait. Without Timeout the
// wait is bounded by the daemon (kin.MaxWait) and the client's connection.
type WaitBody struct {
	Timeout kin.Duration `json:"timeout,omitempty"`
}

// wait answers once the agent has ended and its result is kept. Nothing is
// written until then, so a write deadline the server may set for ordinary
// requests is lifted: the wait is bounded by its timeout and the client.
func (s *Server) wait(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var body WaitBody
	if err := decodeOptionalJSON(r.Body, &body); err != nil {
		return err
	}
	// Not every ResponseWriter supports deadlines (ErrNotSupported): then
	// there is none to lift.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	res, err := s.svc.Wait(r.Context(), kin.WaitRequest{ID: id, Timeout: body.Timeout})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

func (s *Server) result(w http.ResponseWriter, r *http.Request) error {
	return s.withID(w, r, func(ctx context.Context, id kin.AgentID) (any, error) { return s.svc.Result(ctx, id) })
}

func (s *Server) contextPack(w http.ResponseWriter, r *http.Request) error {
	return s.withID(w, r, func(ctx context.Context, id kin.AgentID) (any, error) { return s.svc.ContextPack(ctx, id) })
}
