package httpapi

import (
	"context"
	"net/http"
	"regexp"

	"github.com/kin-agents/kin/kin"
)

// PeerHeader carries another fleet host's signature on a request it
// forwards (package peer checks it, through Server.Peer).
const PeerHeader = "Kin-Peer"

// peerRoutes are what a peer may call: reads of an agent's files that only
// the host running it holds, asked for a caller the peer already checked
// (its log), or for the parent the peer runs (its checked result, served
// by the daemon beside this API: PathHandoff).
var peerRoutes = regexp.MustCompile(`^/v1/agents/[0-9]+/(logs|handoff)$`)

// PathHandoff is the route of a child's checked result, for the host that
// runs its parent (a tar).
const PathHandoff = "/v1/agents/{id}/handoff"

// WriteError answers err as every route does.
func (s *Server) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	s.writeError(w, r, err)
}

// PeerRoute reports whether a peer may call r's method and path.
func PeerRoute(r *http.Request) bool {
	return r.Method == http.MethodGet && peerRoutes.MatchString(r.URL.Path)
}

// servePeer answers a request carrying PeerHeader: on a peer route, as
// Server.Peer says; anywhere else, or acting as an agent, refused.
func (s *Server) servePeer(w http.ResponseWriter, r *http.Request, next http.Handler) {
	var ctx context.Context
	var err error
	switch {
	case s.Peer == nil:
		err = kin.Errorf(kin.ECodeUnauthorized, "%s: this daemon takes no calls from other hosts (it is no host of a fleet)", PeerHeader)
	case !PeerRoute(r):
		err = kin.Errorf(kin.ECodeForbidden, "%s: another host may only read an agent's log or result here, not %s %s", PeerHeader, r.Method, r.URL.Path)
	case r.Header.Get(kin.HeaderActAs) != "":
		err = kin.Errorf(kin.ECodeForbidden, "%s: a host's call acts for nobody (%s)", PeerHeader, kin.HeaderActAs)
	default:
		ctx, err = s.Peer(r)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	next.ServeHTTP(w, r.WithContext(ctx))
}
