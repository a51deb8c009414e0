package ctxfs_test

import (
	"os"
	"path/filepath"
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
	sp := newSpawnBench(b, ctxfs.Options{NoSync: true})
	cpu0 := proctest.CPU()
	for i := 0; b.Loop(); i++ {
		sp.spawn(b, i)
	}
	b.ReportMetric(float64(proctest.CPU()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-us/agent")
}

// spawnBench is the agent filesystem a spawn benchmark works in: four
// parents' sessions, each agent of a uid of its own where this is root.
type spawnBench struct {
	f       *ctxfs.FS
	parents []ctxfs.Session
	key     []byte
}

func newSpawnBench(b *testing.B, o ctxfs.Options) *spawnBench {
	// As the daemon's (runner.prepareDirs): the directories that get one
	// subdirectory per agent spread over the file system's block groups.
	// Without it, on a /tmp that test suites churn, each new inode here
	// costs up to a millisecond (ctxfs.SpreadSubdirs).
	dir := b.TempDir()
	for _, d := range []string{dir, filepath.Join(dir, "home")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			b.Fatal(err)
		}
		if err := ctxfs.SpreadDir(d); err != nil {
			b.Fatal(err)
		}
	}
	f, err := ctxfs.Open(dir, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	sp := &spawnBench{f: f, key: make([]byte, 120)}
	for k := range 4 {
		s := ctxfs.Session{Owner: benchOwner(k), Agent: "p" + strconv.Itoa(k), ID: ctxfs.DefaultSession}
		if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: kin.AgentID(k + 1), Now: t0}); err != nil {
			b.Fatal(err)
		}
		sp.parents = append(sp.parents, s)
	}
	return sp
}

// benchOwner is agent i's owner: a uid of its own as a root daemon's uid
// range gives it, the daemon's own where this is not root.
func benchOwner(i int) ctxfs.Owner {
	if os.Geteuid() != 0 {
		return ctxfs.Owner{UID: os.Geteuid(), GID: os.Getegid()}
	}
	return ctxfs.Owner{UID: 40000 + i, GID: 40000 + i}
}

// spawn makes agent i's part of a spawn (runner.prepareCtx): its session
// and its folder in its parent's context/child/. It returns both sessions.
func (sp *spawnBench) spawn(b *testing.B, i int) (s, parent ctxfs.Session) {
	id := kin.AgentID(i + 10)
	p := sp.parents[i%len(sp.parents)]
	s = ctxfs.Session{Owner: benchOwner(i + 10), Agent: "c" + strconv.Itoa(i), ID: ctxfs.DefaultSession}
	ref := ctxfs.ParentRef{Agent: p.Agent, Session: p.ID, Run: "r" + strconv.Itoa(i%4+1)}
	if err := sp.f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: id, Run: "r" + id.String(), Parent: ref, Cwd: "/work", Key: sp.key, Now: t0}); err != nil {
		b.Fatal(err)
	}
	if err := sp.f.CreateChildDir(ctxfs.ChildParams{Parent: p, Child: s.Agent, ChildID: id, ChildSession: s.ID}); err != nil {
		b.Fatal(err)
	}
	return s, p
}

// BenchmarkAgentLife is one child agent's whole life in the agent
// filesystem as the daemon writes it: its session and its folder in its
// parent's session (as BenchmarkSpawnFolders), its state set active and
// then exited, its result.md copied into its parent's folder (CopyResult),
// and its status there set completed. Sub-benchmarks: rewrites by rename
// (no spare directory) and by exchange with a spare (Options.SpareDir).
// inodes-new/agent and inodes-freed/agent are what ext4 allocated and
// freed per life (proctest.CountInodes; missing where the tracepoints are
// not available); cpu-us/agent is this process's CPU.
func BenchmarkAgentLife(b *testing.B) {
	for _, mode := range []string{"rename", "exchange"} {
		b.Run(mode, func(b *testing.B) {
			o := ctxfs.Options{NoSync: true}
			if mode == "exchange" {
				o.SpareDir = b.TempDir()
			}
			benchAgentLife(b, o)
		})
	}
}

func benchAgentLife(b *testing.B, o ctxfs.Options) {
	sp := newSpawnBench(b, o)
	f := sp.f
	result := []byte("# done\n\nThe patch is in artifact/.\n")
	inodes, ierr := proctest.CountInodes()
	if ierr == nil {
		defer inodes.Close()
	}
	var new0, freed0 int64
	if inodes != nil {
		new0, freed0 = inodes.Read()
	}
	cpu0 := proctest.CPU()
	for i := 0; b.Loop(); i++ {
		s, p := sp.spawn(b, i)
		if err := f.SetSessionState(s, kin.StateActive, t0.Add(time.Second)); err != nil {
			b.Fatal(err)
		}
		out := f.OutputDir(s.UID, s.Agent, s.ID)
		if err := f.WriteFile(filepath.Join(out, ctxfs.FileResult), result, s.Owner, 0o600); err != nil { // the agent's
			b.Fatal(err)
		}
		if err := f.SetSessionState(s, kin.StateExited, t0.Add(2*time.Second)); err != nil {
			b.Fatal(err)
		}
		if _, err := f.CopyResult(out, f.ChildDir(p.UID, p.Agent, p.ID, s.Agent)); err != nil {
			b.Fatal(err)
		}
		if err := f.SetChildStatus(p, s.Agent, ctxfs.ChildCompleted); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(proctest.CPU()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-us/agent")
	if inodes != nil {
		new1, freed1 := inodes.Read()
		b.ReportMetric(float64(new1-new0)/float64(b.N), "inodes-new/agent")
		b.ReportMetric(float64(freed1-freed0)/float64(b.N), "inodes-freed/agent")
	}
}
