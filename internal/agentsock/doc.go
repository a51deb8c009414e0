// Package agentsock serves every agent's own Unix socket (seed 001's
// /ctx/agent/<name>.sock) with one HTTP server and one accept loop over all
// of them (an epoll set in Go's netpoller: no goroutine or thread per
// agent, and a flood on one socket takes its turn among the others). Each
// connection acts as the agent whose socket it came in on, once the kernel
// (SO_PEERCRED, SO_PEERPIDFD) and the supervisor's containment (Peers)
// confirm the peer is one of that agent's processes; and it marks
// connections on the operator socket, refusing a peer inside any agent's
// containment (OperatorConnContext, with SO_PEERPIDFD so that a recycled
// pid is never taken for the peer).
//
// It must never decide what a request may do (the services behind the
// handler do), or accept a connection whose peer it could not identify.
package agentsock
