package agentlog_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kin-agents/kin/internal/agentlog"
)

// BenchmarkOpenLog is what the pipe adds to a spawn: making the named pipe,
// opening both ends and, once the agent's end is closed, the drain's end
// (the pipe removed). The floor is what a spawn did before: opening the
// log file with O_CREATE for the agent, and closing it.
func BenchmarkOpenLog(b *testing.B) {
	dir := b.TempDir()
	b.Run("floor-create-file", func(b *testing.B) {
		for i := range b.N {
			f, err := os.OpenFile(filepath.Join(dir, "f"+strconv.Itoa(i)+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	b.Run("pipe-and-drain", func(b *testing.B) {
		p := newPoller(b)
		for i := range b.N {
			d, out, err := p.Open(agentlog.Config{Path: filepath.Join(dir, "p"+strconv.Itoa(i)+".log"), Bytes: 1 << 20, Keep: 1})
			if err != nil {
				b.Fatal(err)
			}
			out.Close()
			<-d.Done()
		}
	})
}
