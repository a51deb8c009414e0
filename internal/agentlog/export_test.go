package agentlog

import "time"

// SetSweepInterval shortens the poller's sweep (it takes effect after the
// sweep due).
func (p *Poller) SetSweepInterval(d time.Duration) { p.sweepNs.Store(int64(d)) }

// FreeSlots is the pipe holder's free list (nil without a holder).
func (p *Poller) FreeSlots() []uint32 {
	if p.hold == nil {
		return nil
	}
	p.hold.mu.Lock()
	defer p.hold.mu.Unlock()
	return append([]uint32(nil), p.hold.free...)
}

// Peek is the poller's peek (tee(2) of one byte).
func (p *Poller) Peek(r int) (int64, error) { return p.peek(r) }

// IsSpare is isSpare, for the spare pipes' tests.
var IsSpare = isSpare
