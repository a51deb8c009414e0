package httpapi

import (
	"context"
	"net/http"

	"github.com/kin-agents/kin/kin"
)

// LogQuery is the query of the /v1/log/ routes that take one.
type LogQuery struct {
	Seq, From, To int64
	Limit         int
}

// ParseLogQuery reads the query parameters of a /v1/log/ route: known lists
// the ones it takes (of seq, from, to, limit), required those it needs.
func ParseLogQuery(q map[string][]string, known, required []string) (LogQuery, error) {
	var lq LogQuery
	err := eachQueryParam(q, known, "", func(key string, vals []string) error {
		n, err := queryCount(key, vals[0], "a non-negative whole number")
		if err != nil {
			return err
		}
		switch key {
		case "seq":
			lq.Seq = n
		case "from":
			lq.From = n
		case "to":
			lq.To = n
		case "limit":
			if n > 1<<30 {
				return kin.Errorf(kin.ECodeInvalid, "limit %d is too large", n)
			}
			lq.Limit = int(n)
		}
		return nil
	})
	if err != nil {
		return LogQuery{}, err
	}
	for _, key := range required {
		if _, ok := q[key]; !ok {
			return LogQuery{}, kin.Errorf(kin.ECodeInvalid, "query parameter %q is required", key)
		}
	}
	return lq, nil
}

func (s *Server) logCheckpoint(w http.ResponseWriter, r *http.Request) error {
	if _, err := ParseLogQuery(r.URL.Query(), nil, nil); err != nil {
		return err
	}
	cp, err := s.svc.LogCheckpoint(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, cp)
}

func (s *Server) logCheckpoints(w http.ResponseWriter, r *http.Request) error {
	if _, err := ParseLogQuery(r.URL.Query(), nil, nil); err != nil {
		return err
	}
	cps, err := s.svc.LogCheckpoints(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, nonNil(cps))
}

func (s *Server) logProof(w http.ResponseWriter, r *http.Request) error {
	q, err := ParseLogQuery(r.URL.Query(), []string{"seq"}, []string{"seq"})
	if err != nil {
		return err
	}
	p, err := s.svc.LogProof(r.Context(), q.Seq)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, p)
}

func (s *Server) logConsistency(w http.ResponseWriter, r *http.Request) error {
	q, err := ParseLogQuery(r.URL.Query(), []string{"from", "to"}, []string{"from"})
	if err != nil {
		return err
	}
	p, err := s.svc.LogConsistency(r.Context(), q.From, q.To)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, p)
}

func (s *Server) logLeaves(w http.ResponseWriter, r *http.Request) error {
	q, err := ParseLogQuery(r.URL.Query(), []string{"from", "limit"}, []string{"from"})
	if err != nil {
		return err
	}
	leaves, err := s.svc.LogLeaves(r.Context(), q.From, q.Limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, struct {
		Leaves []string `json:"leaves"`
	}{nonNil(leaves)})
}

func (s *Server) logVerify(w http.ResponseWriter, r *http.Request) error {
	var req kin.LogVerifyRequest
	if err := DecodeJSON(r.Body, &req); err != nil {
		return err
	}
	rep, err := s.svc.LogVerify(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, rep)
}

func (s *Server) ancestryProof(w http.ResponseWriter, r *http.Request) error {
	return s.withID(w, r, func(ctx context.Context, id kin.AgentID) (any, error) { return s.svc.AncestryProof(ctx, id) })
}
