package personserver

import (
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Log attribute keys of a refusal's line.
const (
	logKeyCode    = "code"
	logKeyDetail  = "detail"
	logKeyLeftOut = "left_out"
)

// A refusal that is not recorded (its sender is unknown, or past its
// quota) is logged; anyone who can reach the HTTP address can send one,
// so these lines come at most refusalLogBurst at once, then
// refusalLogRate a second, each at most a few hundred bytes.
const (
	refusalLogRate  = 1
	refusalLogBurst = 10
)

// refusalLog writes the refusals the store does not record to the
// daemon's log at a limited rate: a sender without credentials must not
// choose how much kin writes. Each detail is bounded already
// (refusal.what). The line after some were left out says how many.
type refusalLog struct {
	log *slog.Logger
	now func() time.Time
	lim *rate.Limiter

	mu      sync.Mutex
	leftOut int
}

func newRefusalLog(log *slog.Logger, now func() time.Time) *refusalLog {
	return &refusalLog{log: log, now: now, lim: rate.NewLimiter(refusalLogRate, refusalLogBurst)}
}

// write logs msg with a refusal's code and bounded detail, unless too
// many were logged just now.
func (l *refusalLog) write(msg, code, detail string) {
	l.mu.Lock()
	if !l.lim.AllowN(l.now(), 1) {
		l.leftOut++
		l.mu.Unlock()
		return
	}
	leftOut := l.leftOut
	l.leftOut = 0
	l.mu.Unlock()
	attrs := []any{logKeyCode, code, logKeyDetail, detail}
	if leftOut > 0 {
		attrs = append(attrs, logKeyLeftOut, leftOut)
	}
	l.log.Info(msg, attrs...)
}

// LogSignatureRefusal logs, as the refusals of /auth-token are, a request
// to another endpoint (msg) whose signature SignedAgent did not accept.
func (srv *Server) LogSignatureRefusal(msg string, err error) {
	code, detail := signatureRefusal(err).what()
	srv.refusals.write(msg, code, detail)
}
