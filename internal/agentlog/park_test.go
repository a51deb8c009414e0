package agentlog_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/agentlog"
)

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestParkedDrainsHoldNoDescriptor (issue 22): quiet drains park, holding
// none of the daemon's descriptors (their pipes are held without one, the
// log files are closed); output written to a parked pipe still reaches the
// log, in order, also when the writer is gone by the time the drain looks
// (the bytes were not lost with the pipe's last writer), and also a write
// larger than the pipe.
func TestParkedDrainsHoldNoDescriptor(t *testing.T) {
	p, err := agentlog.NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.Holding() {
		t.Skip("no pipe holder here (io_uring refused): drains keep their read ends")
	}
	p.SetSweepInterval(20 * time.Millisecond)
	dir := t.TempDir()
	const n = 100
	var outs []*os.File
	var ds []*agentlog.Drain
	// Each writer's own copy is the agent's: the test keeps it, as the
	// agent would, and counts only the drains' descriptors.
	before := openFDs(t)
	for i := range n {
		d, out, err := p.Open(agentlog.Config{Path: filepath.Join(dir, fmt.Sprintf("%d.log", i)), Bytes: 1 << 30, Keep: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		outs, ds = append(outs, out), append(ds, d)
		out.Write([]byte(fmt.Sprintf("first %d\n", i)))
	}
	waitFor(t, "the quiet drains to park", func() bool { return openFDs(t)-before <= n+5 })
	log := func(i int) string {
		b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%d.log", i)))
		return string(b)
	}
	for i := range n {
		if got, want := log(i), fmt.Sprintf("first %d\n", i); got != want {
			t.Fatalf("log %d: %q, want %q", i, got, want)
		}
	}
	// A parked drain wakes on output.
	outs[7].Write([]byte("second 7\n"))
	waitFor(t, "the output of a parked drain", func() bool { return log(7) == "first 7\nsecond 7\n" })
	// Written, then the writer gone, while parked: kept, and the end seen.
	waitFor(t, "the drains to park again", func() bool { return openFDs(t)-before <= n+5 })
	outs[9].Write([]byte("last words 9\n"))
	outs[9].Close()
	<-ds[9].Done()
	if got := log(9); got != "first 9\nlast words 9\n" {
		t.Fatalf("log 9 after its writer left: %q", got)
	}
	// More than the pipe holds, in one write, to a parked drain.
	waitFor(t, "the drains to park again", func() bool { return openFDs(t)-before <= n+5 })
	big := lines(0, 4<<20/12)
	wrote := make(chan error, 1)
	go func() { _, err := outs[11].Write(big); wrote <- err }()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	want := append([]byte("first 11\n"), big...)
	waitFor(t, "the large write in its log", func() bool { return len(log(11)) == len(want) })
	if !bytes.Equal([]byte(log(11)), want) {
		t.Fatal("log 11: the large write is not there in order")
	}
}

// TestEndedDrainsFreeTheirSlotOnce: a held drain that ends gives its
// holder slot back once. (It was given back twice, by the poller's remove
// and by unholdPipe: the next two drains then shared one slot, and the
// second's pipe replaced the first's in the holder, so a parked drain
// could lose its pipe and its agent's output.)
func TestEndedDrainsFreeTheirSlotOnce(t *testing.T) {
	p, err := agentlog.NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.Holding() {
		t.Skip("no pipe holder here (io_uring refused): drains keep their read ends")
	}
	dir := t.TempDir()
	const n = 3
	for i := range n {
		d, out, err := p.Open(agentlog.Config{Path: filepath.Join(dir, fmt.Sprintf("%d.log", i)), Bytes: 1 << 20, Keep: 1})
		if err != nil {
			t.Fatal(err)
		}
		out.Close() // the writer gone: the drain ends
		<-d.Done()
	}
	free := p.FreeSlots()
	seen := map[uint32]bool{}
	for _, s := range free {
		if seen[s] {
			t.Fatalf("slot %d is free twice (free list %v): two drains would share it", s, free)
		}
		seen[s] = true
	}
	if len(free) == 0 {
		t.Fatal("no slot came back to the free list")
	}
}
