package agentlog

import "time"

// SetSweepInterval shortens the poller's sweep (it takes effect after the
// sweep due).
func (p *Poller) SetSweepInterval(d time.Duration) { p.sweepNs.Store(int64(d)) }
