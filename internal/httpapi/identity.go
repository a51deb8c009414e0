package httpapi

import (
	"net/http"
	"strconv"

	"github.com/kin-agents/kin/kin"
)

func (s *Server) agentToken(w http.ResponseWriter, r *http.Request) error {
	t, err := s.svc.Token(r.Context())
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusOK, t)
}

func (s *Server) grant(w http.ResponseWriter, r *http.Request) error {
	var req kin.GrantRequest
	if err := DecodeJSON(r.Body, &req); err != nil {
		return err
	}
	g, err := s.svc.Grant(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, g)
}

// agentQuery parses an optional ?agent=ID.
func agentQuery(r *http.Request) (kin.AgentID, error) {
	v := r.URL.Query().Get("agent")
	if v == "" {
		return 0, nil
	}
	return kin.ParseAgentID(v)
}

func (s *Server) grants(w http.ResponseWriter, r *http.Request) error {
	id, err := agentQuery(r)
	if err != nil {
		return err
	}
	gs, err := s.svc.Grants(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, gs)
}

func (s *Server) ungrant(w http.ResponseWriter, r *http.Request) error {
	var req kin.UngrantRequest
	if err := DecodeJSON(r.Body, &req); err != nil {
		return err
	}
	g, err := s.svc.Ungrant(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, g)
}

func (s *Server) authTokens(w http.ResponseWriter, r *http.Request) error {
	id, err := agentQuery(r)
	if err != nil {
		return err
	}
	f := kin.AuthTokenFilter{Agent: id}
	if v := r.URL.Query().Get("expired"); v != "" {
		if f.Expired, err = strconv.ParseBool(v); err != nil {
			return kin.Errorf(kin.ECodeInvalid, "expired=%q is not true or false", v)
		}
	}
	ts, err := s.svc.AuthTokens(r.Context(), f)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ts)
}

// RotateBody is the body of POST /v1/keys/rotate.
type RotateBody struct {
	Role string `json:"role"`
}

func (s *Server) rotateKeys(w http.ResponseWriter, r *http.Request) error {
	var body RotateBody
	if err := DecodeJSON(r.Body, &body); err != nil {
		return err
	}
	k, err := s.svc.RotateKeys(r.Context(), body.Role)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, k)
}
