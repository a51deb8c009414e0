package httpapi

import "net/http"

// hosts is GET /v1/hosts: the fleet's hosts.
func (s *Server) hosts(w http.ResponseWriter, r *http.Request) error {
	if _, err := ParseLogQuery(r.URL.Query(), nil, nil); err != nil {
		return err // no parameters
	}
	hs, err := s.svc.Hosts(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, nonNil(hs))
}
