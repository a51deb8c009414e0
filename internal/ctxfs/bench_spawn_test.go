package ctxfs_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkSpawnFolders is a spawn's part of the agent filesystem as the
// daemon makes it (runner.prepareCtx): a child's session (with output/ and
// its key) and its folder in its parent's context/child/, children of four
// parents, each agent of a uid of its own as a root daemon's uid range
// gives them (the daemon's own uid where this is not root). cpu-us/agent
// is this process's CPU (user and system) per agent.
func BenchmarkSpawnFolders(b *testing.B) {
	f, err := ctxfs.Open(b.TempDir(), ctxfs.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	owner := func(i int) ctxfs.Owner {
		if os.Geteuid() != 0 {
			return ctxfs.Owner{UID: os.Geteuid(), GID: os.Getegid()}
		}
		return ctxfs.Owner{UID: 40000 + i, GID: 40000 + i}
	}
	var parents []ctxfs.Session
	for k := range 4 {
		s := ctxfs.Session{Owner: owner(k), Agent: "p" + strconv.Itoa(k), ID: ctxfs.DefaultSession}
		if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: kin.AgentID(k + 1), Now: t0}); err != nil {
			b.Fatal(err)
		}
		parents = append(parents, s)
	}
	key := make([]byte, 120)
	cpu0 := proctest.CPU()
	for i := 0; b.Loop(); i++ {
		id := kin.AgentID(i + 10)
		p := parents[i%len(parents)]
		s := ctxfs.Session{Owner: owner(i + 10), Agent: "c" + strconv.Itoa(i), ID: ctxfs.DefaultSession}
		ref := ctxfs.ParentRef{Agent: p.Agent, Session: p.ID, Run: "r" + strconv.Itoa(i%4+1)}
		if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: id, Run: "r" + id.String(), Parent: ref, Cwd: "/work", Key: key, Now: t0}); err != nil {
			b.Fatal(err)
		}
		if err := f.CreateChildDir(ctxfs.ChildParams{Parent: p, Child: s.Agent, ChildID: id, ChildSession: s.ID}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(proctest.CPU()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-us/agent")
}
