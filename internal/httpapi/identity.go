package httpapi

import (
	"net/http"

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

// ParseGrantsQuery reads GET /v1/grants: an optional agent.
func ParseGrantsQuery(q map[string][]string) (agent kin.AgentID, err error) {
	err = eachQueryParam(q, []string{"agent"}, "", func(_ string, vals []string) error {
		agent, err = kin.ParseAgentID(vals[0])
		return err
	})
	return agent, err
}

// ParseAuthTokensQuery reads GET /v1/auth-tokens: an optional agent and
// whether expired tokens are wanted.
func ParseAuthTokensQuery(q map[string][]string) (f kin.AuthTokenFilter, err error) {
	err = eachQueryParam(q, []string{"agent", "expired"}, "", func(key string, vals []string) error {
		v := vals[0]
		switch key {
		case "agent":
			f.Agent, err = kin.ParseAgentID(v)
			return err
		case "expired":
			f.Expired, err = queryBool(key, v)
			return err
		}
		return nil
	})
	return f, err
}

func (s *Server) grants(w http.ResponseWriter, r *http.Request) error {
	id, err := ParseGrantsQuery(r.URL.Query())
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
	f, err := ParseAuthTokensQuery(r.URL.Query())
	if err != nil {
		return err
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
