package ctxfuse

// Held counts what m keeps for nodes the kernel holds: agents'
// directories and sockets (bound, or unlinked and not yet forgotten).
func Held(m *Mount) (dirs, socks int) {
	m.root.mu.Lock()
	defer m.root.mu.Unlock()
	return len(m.root.dirs), len(m.root.sockIno)
}
