package fleettest_test

import (
	"cmp"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fleettest"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkFleetSpawn is issue 24's cross-host spawn against same-host
// spawn on the same store, in the same fleet and iteration: spawns received
// by host a's API (its socket), each a child of a root on a running sleep,
// either run on a (same host: a starts it) or placed on c (--host c: a
// registers it, c's follower starts it, a answers once c recorded its pid).
//
//   - latency: one client, spawns alternating same-host and placed, each
//     timed to its answer; p50 of each (local-p50-ms, placed-p50-ms,
//     x-p50 = placed ÷ local), and a raw fork/exec of sleep as the floor
//     (fork-exec-p50-ms);
//   - throughput: 16 clients at once, spawnsPerClient each, same-host then
//     placed (the order swapped every other iteration); spawns a second
//     (local-spawns/s, placed-spawns/s, x-throughput = local ÷ placed).
//
// Each phase's agents are stopped (their root's owned subtree) before the
// next.
func BenchmarkFleetSpawn(b *testing.B) {
	f := fleettest.Start(b)
	a := f.Host(b, "a")
	f.Host(b, "c") // where the placed ones run
	ctx := context.Background()
	if _, err := a.Client.SetGovernor(ctx, "max_children", "0"); err != nil { // many children under one root
		b.Fatal(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		b.Fatal(err)
	}
	const (
		latencySpawns   = 40 // of each kind
		clients         = 16
		spawnsPerClient = 8
	)
	zero := kin.Duration(0)
	spawnAgent := func(name string, parent kin.AgentID, host string) (*kin.Agent, time.Duration) {
		began := time.Now()
		ag, err := a.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: name, Parent: parent, Responsible: "bench"},
			Command: []string{sleep, "1000"}, Grace: &zero, Host: host})
		took := time.Since(began)
		if err != nil {
			b.Errorf("spawn %s (host %q): %v", name, host, err) // Error: the clients' goroutines call it too
			return nil, took
		}
		if want := cmp.Or(host, "a"); ag.PID == 0 || ag.Host != want {
			b.Errorf("spawn %s: host %q pid %d; want host %s and a pid", name, ag.Host, ag.PID, want)
			return nil, took
		}
		return ag, took
	}
	spawn := func(name string, parent kin.AgentID, host string) time.Duration {
		_, took := spawnAgent(name, parent, host)
		return took
	}
	stopTree := func(root kin.AgentID) {
		if _, err := a.Client.Stop(ctx, kin.StopRequest{ID: root, Grace: &zero}); err != nil {
			b.Fatalf("stop %d: %v", root, err)
		}
	}
	var local, placed, forkExec []time.Duration
	var localRate, placedRate []float64
	for iter := 0; b.Loop(); iter++ {
		root, _ := spawnAgent(fmt.Sprintf("lat-root-%d", iter), 0, "")
		if root == nil {
			b.FailNow()
		}
		rootID := root.ID
		for i := range latencySpawns {
			if b.Failed() {
				b.FailNow()
			}
			local = append(local, spawn(fmt.Sprintf("l%d-%d", iter, i), rootID, ""))
			placed = append(placed, spawn(fmt.Sprintf("p%d-%d", iter, i), rootID, "c"))
			began := time.Now()
			cmd := exec.Command(sleep, "1000")
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			forkExec = append(forkExec, time.Since(began))
			cmd.Process.Kill()
			cmd.Wait()
		}
		stopTree(rootID)

		throughput := func(tag, host string) float64 {
			tpRoot, _ := spawnAgent(fmt.Sprintf("tp-%s-%d", tag, iter), 0, "")
			if tpRoot == nil {
				b.FailNow()
			}
			var wg sync.WaitGroup
			began := time.Now()
			for k := range clients {
				wg.Go(func() {
					for j := range spawnsPerClient {
						spawn(fmt.Sprintf("t%s%d-%d-%d", tag, iter, k, j), tpRoot.ID, host)
					}
				})
			}
			wg.Wait()
			if b.Failed() {
				b.FailNow()
			}
			rate := float64(clients*spawnsPerClient) / time.Since(began).Seconds()
			stopTree(tpRoot.ID)
			return rate
		}
		if iter%2 == 0 {
			localRate = append(localRate, throughput("l", ""))
			placedRate = append(placedRate, throughput("p", "c"))
		} else {
			placedRate = append(placedRate, throughput("p", "c"))
			localRate = append(localRate, throughput("l", ""))
		}
	}
	lp, pp, fp := p50(local), p50(placed), p50(forkExec)
	lr, pr := mean(localRate), mean(placedRate)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(lp), "local-p50-ms")
	b.ReportMetric(ms(pp), "placed-p50-ms")
	b.ReportMetric(float64(pp)/float64(lp), "x-p50")
	b.ReportMetric(ms(fp), "fork-exec-p50-ms")
	b.ReportMetric(lr, "local-spawns/s")
	b.ReportMetric(pr, "placed-spawns/s")
	b.ReportMetric(lr/pr, "x-throughput")
	b.Logf("latency (one client, %d of each): same host p50 %s p90 %s, placed p50 %s p90 %s, fork/exec p50 %s; throughput (%d clients × %d): same host %.0f/s, placed %.0f/s",
		len(local), lp.Round(time.Microsecond), pct(local, 90).Round(time.Microsecond), pp.Round(time.Microsecond), pct(placed, 90).Round(time.Microsecond),
		fp.Round(time.Microsecond), clients, spawnsPerClient, lr, pr)
}

func p50(ds []time.Duration) time.Duration { return pct(ds, 50) }

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func mean(xs []float64) float64 {
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t / float64(max(len(xs), 1))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
