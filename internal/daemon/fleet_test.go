package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/personserver"
	"github.com/kin-agents/kin/internal/pgtest"
	"github.com/kin-agents/kin/kin"
)

// TestHostsShareOneStore: two daemons (two homes) on one PostgreSQL
// database are two hosts of one fleet. Each lists both, live, itself
// marked; an agent spawned on one is recorded with its host and counted
// for it, and the other host reads it from the store. A third daemon
// asking for a name whose lease runs is refused, naming --host-name; once
// that host stops cleanly (releasing its lease) the name is free.
func TestHostsShareOneStore(t *testing.T) {
	dsn, key := pgtest.NewDatabase(t), kintest.WithLogKeyDir(filepath.Join(t.TempDir(), "log-key"))
	a := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("alpha"), key)
	b := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("beta"), key)
	w := spawnAgent(t, a.Client, "worker", 0, "sleep")
	if w.Host != "alpha" {
		t.Fatalf("an agent spawned on alpha records host %q", w.Host)
	}
	seen, err := b.Client.Agent(ctx, w.ID)
	if err != nil || seen.Host != "alpha" || seen.PID != w.PID {
		t.Fatalf("beta reads alpha's agent as %+v, %v", seen, err)
	}
	// Each host announces its address and containment in the background,
	// once it serves.
	kintest.WaitFor(t, 10*time.Second, "both hosts announced", func() bool {
		hs, err := a.Client.Hosts(ctx)
		return err == nil && len(hs) == 2 && hs[0].Containment != "" && hs[1].Containment != ""
	})
	for _, d := range []*kintest.Daemon{a, b} {
		hs, err := d.Client.Hosts(ctx)
		if err != nil || len(hs) != 2 {
			t.Fatalf("hosts: %+v, %v", hs, err)
		}
		st, _ := d.Client.Status(ctx)
		for _, h := range hs {
			if !h.Live || h.Self != (h.Name == st.Host) || h.Containment == "" || h.LeaseUntil.IsZero() {
				t.Errorf("%s lists %+v", st.Host, h)
			}
		}
		if hs[0].Name != "alpha" || hs[0].Agents != 1 || hs[1].Name != "beta" || hs[1].Agents != 0 {
			t.Errorf("%s lists %+v", st.Host, hs)
		}
	}
	// An agent may not list the fleet.
	if _, err := a.Client.ActingAs(w.ID.String()).Hosts(ctx); kin.ErrorCodeOf(err) != kin.ECodeForbidden {
		t.Errorf("an agent lists the hosts: %v", err)
	}
	// A third home asking for alpha is refused while alpha's lease runs.
	cfg := daemon.DefaultConfig()
	cfg.Home, cfg.HTTPAddr, cfg.Store, cfg.HostName = kintest.TempHome(t), "off", dsn, "alpha"
	cfg.UIDRangeDir = t.TempDir()
	key(&cfg)
	if d, err := daemon.Start(ctx, cfg); err == nil {
		d.Close()
		t.Fatal("a second daemon started as host alpha")
	} else if !strings.Contains(err.Error(), `host name "alpha" is held by another kin serve`) || !strings.Contains(err.Error(), "--host-name") {
		t.Fatalf("the second alpha's error: %v", err)
	}
	// alpha stops cleanly: its lease is released, and the name is free.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	hs, err := b.Client.Hosts(ctx)
	if err != nil || len(hs) != 2 || hs[0].Live || !hs[0].LeaseUntil.IsZero() {
		t.Fatalf("after alpha stopped: %+v, %v", hs, err)
	}
	c := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("alpha"), key)
	if st, err := c.Client.Status(ctx); err != nil || st.Host != "alpha" {
		t.Fatalf("the new alpha: %+v, %v", st, err)
	}
}

// TestHostNameDefaultsToTheMachines: without --host-name a daemon is its
// machine's host, alone in the fleet of its own store.
func TestHostNameDefaultsToTheMachines(t *testing.T) {
	d := kintest.StartDaemon(t)
	st, err := d.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.Hostname()
	if st.Host != want {
		t.Fatalf("host %q, want the machine's %q", st.Host, want)
	}
	hs, err := d.Client.Hosts(ctx)
	if err != nil || len(hs) != 1 || hs[0].Name != want || !hs[0].Self || !hs[0].Live {
		t.Fatalf("hosts: %+v, %v", hs, err)
	}
}

// TestTreeSpansTheFleet: a family registered through two hosts on one
// store (a root on alpha, a child of it on beta, a grandchild on alpha) is
// one tree on both hosts: each learns of the other's registrations from
// the store and shows the whole family, children in id order. A governor
// setting changed on one host is in force on the other.
func TestTreeSpansTheFleet(t *testing.T) {
	dsn, key := pgtest.NewDatabase(t), kintest.WithLogKeyDir(filepath.Join(t.TempDir(), "log-key"))
	a := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("alpha"), key)
	b := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("beta"), key)
	reg := func(d *kintest.Daemon, name string, parent kin.AgentID) *kin.Agent {
		t.Helper()
		ag, err := d.Client.Register(ctx, kin.RegisterRequest{Name: name, Parent: parent, Responsible: "Dr. Schmidt"})
		if err != nil {
			t.Fatal(err)
		}
		return ag
	}
	root := reg(a, "root", 0)
	kid1 := reg(b, "kid1", root.ID)
	kid2 := reg(a, "kid2", root.ID)
	grand := reg(a, "grand", kid1.ID)
	kid3 := reg(b, "kid3", root.ID)
	want := fmt.Sprintf("%d[%d[%d] %d %d]", root.ID, kid1.ID, grand.ID, kid2.ID, kid3.ID)
	for _, d := range []*kintest.Daemon{a, b} {
		var got string
		kintest.WaitFor(t, 10*time.Second, "the whole family on "+d.Config.HostName, func() bool {
			trees, err := d.Client.Tree(ctx, root.ID)
			if err != nil || len(trees) != 1 {
				return false
			}
			got = shape(trees[0])
			return got == want
		})
		hosts := map[string]string{}
		trees, _ := d.Client.Tree(ctx, root.ID)
		var walk func(n *kin.TreeNode)
		walk = func(n *kin.TreeNode) {
			hosts[n.Name] = n.Host
			for _, c := range n.Children {
				walk(c)
			}
		}
		walk(trees[0])
		if fmt.Sprint(hosts) != "map[grand:alpha kid1:beta kid2:alpha kid3:beta root:alpha]" {
			t.Errorf("%s: hosts %v", d.Config.HostName, hosts)
		}
	}
	// The forest is the store's, whatever the host has followed: with
	// alpha's follower held, a root and a child beta registers now are in
	// alpha's forest at once (it catches up before it reads).
	release := a.Daemon.Registry.HoldFollowing()
	root2 := reg(b, "root2", 0)
	kid5 := reg(b, "kid5", root2.ID)
	forest, err := a.Client.Tree(ctx, 0)
	release()
	if err != nil {
		t.Fatal(err)
	}
	var shapes []string
	for _, n := range forest {
		shapes = append(shapes, shape(n))
	}
	if got, want := strings.Join(shapes, " "), want+fmt.Sprintf(" %d[%d]", root2.ID, kid5.ID); got != want {
		t.Errorf("alpha's forest with its follower held: %s, want %s", got, want)
	}
	if _, err := a.Client.SetGovernor(ctx, "max_children", "3"); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 10*time.Second, "beta to apply alpha's governor setting", func() bool {
		g, err := b.Client.Governor(ctx)
		return err == nil && g.Profile.MaxChildren == 3
	})
	if _, err := b.Client.Register(ctx, kin.RegisterRequest{Name: "kid4", Parent: root.ID}); kin.ErrorCodeOf(err) != kin.ECodeMaxChildren {
		t.Fatalf("a fourth child through beta under max_children 3: %v", err)
	}
}

// shape is a tree as "id[children...]".
func shape(n *kin.TreeNode) string {
	s := n.ID.String()
	if len(n.Children) == 0 {
		return s
	}
	parts := make([]string, len(n.Children))
	for i, c := range n.Children {
		parts[i] = shape(c)
	}
	return s + "[" + strings.Join(parts, " ") + "]"
}

// TestFleetHasOneLogKey: the fleet signs one log with one key. A second
// host whose home holds another log key is refused, naming the files to
// copy; with the first host's key copied in, it joins, and a checkpoint
// either host signs verifies with the one key.
func TestFleetHasOneLogKey(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("alpha"))
	cfg := daemon.DefaultConfig()
	cfg.Home, cfg.HTTPAddr, cfg.Store, cfg.HostName = kintest.TempHome(t), "off", dsn, "beta"
	cfg.UIDRangeDir = t.TempDir()
	if d, err := daemon.Start(ctx, cfg); err == nil {
		d.Close()
		t.Fatal("a host with its own log key joined the fleet")
	} else if !strings.Contains(err.Error(), "is not the fleet's") || !strings.Contains(err.Error(), filepath.Join(cfg.Home, "keys", "log")) {
		t.Fatalf("the refusal: %v", err)
	}
	// The operator points beta at alpha's log key (a copy of it, on
	// another machine).
	b := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("beta"),
		kintest.WithLogKeyDir(filepath.Join(a.Home, "keys", "log")))
	spawnAgent(t, b.Client, "on-beta", 0, "sleep")
	cpB, err := b.Client.LogCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cpA, err := a.Client.LogCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cpA.Key != cpB.Key {
		t.Fatalf("two keys: %s and %s", cpA.Key, cpB.Key)
	}
	for _, d := range []*kintest.Daemon{a, b} {
		rep, err := d.Client.LogVerify(ctx, kin.LogVerifyRequest{Checkpoint: cpB.Note})
		if err != nil || !rep.OK {
			t.Fatalf("%s verifies the fleet's log: %+v, %v", d.Config.HostName, rep, err)
		}
	}
}

// TestSpawnPlacedOnAnotherDaemon: two daemons on one store; a spawn asked
// of alpha with Host beta is started by beta (its process in beta's
// cgroup root, recorded with beta's host) and answered by alpha with its
// pid; a child of it asked of alpha with no host runs beside its parent on
// beta; stopping it through alpha stops both. An unknown host is refused
// naming the fleet's hosts, and a policy with mounts (files alpha checked)
// cannot be placed on beta; neither registers anything.
func TestSpawnPlacedOnAnotherDaemon(t *testing.T) {
	dsn, key := pgtest.NewDatabase(t), kintest.WithLogKeyDir(filepath.Join(t.TempDir(), "log-key"))
	a := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("alpha"), key)
	b := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("beta"), key)
	sleep := []string{"/bin/sh", "-c", "exec sleep 1000"}
	placed, err := a.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "placed", Responsible: "t"},
		Command: sleep, Host: "beta"})
	if err != nil {
		t.Fatalf("spawn placed on beta through alpha: %v", err)
	}
	if placed.Host != "beta" || placed.PID == 0 {
		t.Fatalf("placed = host %q pid %d; want beta and a pid", placed.Host, placed.PID)
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", placed.PID))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := b.Client.Status(ctx); err == nil && st.Containment == "cgroup2" {
		sa, _ := a.Client.Status(ctx)
		if !strings.Contains(string(cg), "/"+filepath.Base(st.CgroupRoot)+"/") || strings.Contains(string(cg), "/"+filepath.Base(sa.CgroupRoot)+"/") {
			t.Errorf("placed runs in %s; want under beta's root %s", strings.TrimSpace(string(cg)), st.CgroupRoot)
		}
	}
	kid, err := a.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "kid", Parent: placed.ID}, Command: sleep})
	if err != nil || kid.Host != "beta" || kid.PID == 0 {
		t.Fatalf("a child of placed asked of alpha: %+v, %v; want it on beta, beside its parent", kid, err)
	}

	n0 := len(mustAgents(t, a))
	_, err = a.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "nowhere", Responsible: "t"}, Command: sleep, Host: "gamma"})
	wantCode(t, err, kin.ECodeInvalid)
	if !strings.Contains(err.Error(), "its hosts: alpha, beta") {
		t.Errorf("unknown host: %v; want the fleet's hosts named", err)
	}
	dir := t.TempDir()
	_, err = a.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "mounted", Responsible: "t",
		Policy: &kin.Policy{Mounts: map[string]kin.Mode{dir: kin.ModeRW}}}, Command: sleep, Host: "beta"})
	wantCode(t, err, kin.ECodeInvalid)
	if n := len(mustAgents(t, a)); n != n0 {
		t.Errorf("refused placements registered %d agents", n-n0)
	}

	if _, err := a.Client.Stop(ctx, kin.StopRequest{ID: placed.ID}); err != nil {
		t.Fatal(err)
	}
	for _, ag := range []*kin.Agent{placed, kid} {
		got, err := b.Client.Agent(ctx, ag.ID)
		if err != nil || !got.State.Terminal() {
			t.Errorf("%s after the stop: %+v, %v", ag.Name, got, err)
		}
		kintest.WaitFor(t, 10*time.Second, ag.Name+"'s process gone", func() bool { return syscall.Kill(ag.PID, 0) != nil })
	}
}

func mustAgents(t *testing.T, d *kintest.Daemon) []*kin.Agent {
	t.Helper()
	as, err := d.Client.Agents(ctx, kin.AgentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// TestPlacedAgentKeepsItsAncestorsPolicy: a parent registered on alpha
// with a policy that denies exec; its children running on beta, one spawned
// through beta and one placed on beta through alpha, are denied exec by
// beta too (beta's cache holds the chain the registration read, or learns
// it from the store before a placed start), not only by alpha.
func TestPlacedAgentKeepsItsAncestorsPolicy(t *testing.T) {
	dsn, key := pgtest.NewDatabase(t), kintest.WithLogKeyDir(filepath.Join(t.TempDir(), "log-key"))
	a := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("alpha"), key)
	b := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("beta"), key)
	parent, err := a.Client.Register(ctx, kin.RegisterRequest{Name: "strict", Responsible: "t",
		Policy: &kin.Policy{Tools: &kin.ToolRules{Deny: []string{"exec"}}}})
	if err != nil {
		t.Fatal(err)
	}
	sleep := []string{"/bin/sh", "-c", "exec sleep 1000"}
	// Wait until beta's lineage has the parent (its follower), as a
	// spawn through beta needs.
	kintest.WaitFor(t, 10*time.Second, "beta knows the parent", func() bool {
		_, err := b.Client.Children(ctx, parent.ID)
		return err == nil
	})
	viaB, err := b.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "via-beta", Parent: parent.ID}, Command: sleep})
	if err != nil || viaB.Host != "beta" {
		t.Fatalf("spawn through beta: %+v, %v", viaB, err)
	}
	placed, err := a.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "placed-beta", Parent: parent.ID}, Command: sleep, Host: "beta"})
	if err != nil || placed.Host != "beta" {
		t.Fatalf("spawn placed on beta through alpha: %+v, %v", placed, err)
	}
	for _, ag := range []*kin.Agent{viaB, placed} {
		for _, d := range []*kintest.Daemon{a, b} {
			dec, err := d.Client.Authorize(ctx, kin.AuthorizeRequest{Agent: ag.ID, Tool: "exec"})
			if err != nil || dec.Allowed {
				t.Errorf("%s asks %s for exec: %+v, %v; want denied by its parent's policy", ag.Name, d.Config.HostName, dec, err)
			}
		}
	}
}

// TestFleetHasOneIssuer: the fleet issues tokens under one issuer and
// serves one set of keys. The first host records its own address as the
// fleet's issuer; a second host, given none, takes it (so an agent's
// identifier is the same whichever host issued its token), and serves
// both hosts' keys, as the first does; a host given another --issuer is
// refused, naming the fleet's.
func TestFleetHasOneIssuer(t *testing.T) {
	dsn, key := pgtest.NewDatabase(t), kintest.WithLogKeyDir(filepath.Join(t.TempDir(), "log-key"))
	a := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("alpha"), kintest.WithHTTP(), key)
	b := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("beta"), kintest.WithHTTP(), key)
	issuer := "http://" + a.HTTPAddr()
	for _, d := range []*kintest.Daemon{a, b} {
		resp, err := http.Get("http://" + d.HTTPAddr() + "/.well-known/aauth-agent.json")
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ Issuer string }
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if m.Issuer != issuer {
			t.Errorf("%s's issuer is %q; want the fleet's, %s", d.Config.HostName, m.Issuer, issuer)
		}
	}
	var sets [2]string
	for i, d := range []*kintest.Daemon{a, b} {
		kintest.WaitFor(t, 10*time.Second, d.Config.HostName+" serves both hosts' keys", func() bool {
			set := kinJWKS(t, "http://"+d.HTTPAddr(), "/.well-known/jwks.json")
			sets[i] = fmt.Sprint(set.Keys)
			return len(set.Keys) == 2
		})
	}
	if sets[0] != sets[1] {
		t.Errorf("alpha serves %s, beta %s", sets[0], sets[1])
	}

	cfg := daemon.DefaultConfig()
	cfg.Home, cfg.HTTPAddr, cfg.Store, cfg.HostName = kintest.TempHome(t), "127.0.0.1:0", dsn, "gamma"
	cfg.UIDRangeDir, cfg.LogKeyDir, cfg.Issuer = t.TempDir(), a.Config.LogKeyDir, "https://kin.example"
	if d, err := daemon.Start(ctx, cfg); err == nil {
		d.Close()
		t.Fatal("a host with another issuer joined the fleet")
	} else if !strings.Contains(err.Error(), "is not the fleet's") || !strings.Contains(err.Error(), "--issuer "+issuer) {
		t.Fatalf("the refusal: %v", err)
	}
	// A refused host published no key.
	if set := kinJWKS(t, "http://"+a.HTTPAddr(), "/.well-known/jwks.json"); len(set.Keys) != 2 {
		t.Errorf("after gamma's refusal alpha serves %d keys", len(set.Keys))
	}
}

// TestPromotionReachesEveryHost: a stage changed on one host of the fleet
// is what every host's permission checks use from then on. A parent
// registered on alpha at stage supervised (exec allowed) has a child
// spawned through beta (beta caches the parent's layer); alpha then moves
// the parent to restricted (no exec): beta, which learns it through the
// store's log, denies exec to the child it runs and to a child spawned
// after the change. Without the follower's re-read, beta kept the old
// stage and allowed exec beyond what the parent now has. Likewise an agent
// registered on alpha with a policy of its own is answered for on beta with
// that policy (beta had no layer for it, and allowed).
func TestPromotionReachesEveryHost(t *testing.T) {
	dsn, key := pgtest.NewDatabase(t), kintest.WithLogKeyDir(filepath.Join(t.TempDir(), "log-key"))
	a := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("alpha"), key)
	b := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("beta"), key)
	parent, err := a.Client.Register(ctx, kin.RegisterRequest{Name: "teacher", Responsible: "t", Stage: "supervised"})
	if err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 10*time.Second, "beta knows the parent", func() bool {
		_, err := b.Client.Children(ctx, parent.ID)
		return err == nil
	})
	register := func(name string) *kin.Agent {
		t.Helper()
		c, err := b.Client.Register(ctx, kin.RegisterRequest{Name: name, Parent: parent.ID})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	exec := func(d *kintest.Daemon, id kin.AgentID) bool {
		t.Helper()
		dec, err := d.Client.Authorize(ctx, kin.AuthorizeRequest{Agent: id, Tool: "exec"})
		if err != nil {
			t.Fatal(err)
		}
		return dec.Allowed
	}
	// An agent registered on alpha with a policy of its own: beta answers
	// for it with that policy too.
	strict, err := a.Client.Register(ctx, kin.RegisterRequest{Name: "strict", Responsible: "t",
		Policy: &kin.Policy{Tools: &kin.ToolRules{Deny: []string{"exec"}}}})
	if err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 10*time.Second, "beta to deny exec to an agent alpha registered with a policy denying it", func() bool {
		dec, err := b.Client.Authorize(ctx, kin.AuthorizeRequest{Agent: strict.ID, Tool: "exec"})
		return err == nil && !dec.Allowed // not found: beta has not followed it yet
	})
	first := register("student-1")
	if !exec(b, first.ID) {
		t.Fatal("a child of a supervised parent may not exec on beta")
	}
	if _, err := a.Client.Promote(ctx, kin.PromoteRequest{Agent: parent.ID, Stage: "restricted"}); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 10*time.Second, "beta to deny exec to the child under the now restricted parent", func() bool {
		return !exec(b, first.ID)
	})
	second := register("student-2")
	for _, d := range []*kintest.Daemon{a, b} {
		// Registered on beta: alpha answers for it once its follower
		// has read it (not found until then; CI saw alpha asked first).
		kintest.WaitFor(t, 10*time.Second, d.Config.HostName+" to follow student-2's registration", func() bool {
			_, err := d.Client.Authorize(ctx, kin.AuthorizeRequest{Agent: second.ID, Tool: "exec"})
			return err == nil
		})
	}
	for _, d := range []*kintest.Daemon{a, b} {
		for _, c := range []*kin.Agent{first, second} {
			if exec(d, c.ID) {
				t.Errorf("%s allows %s exec under a restricted parent", d.Config.HostName, c.Name)
			}
		}
	}
}

// TestSignedRequestsAreForOneHost: a signed request names the host it was
// made for (its @authority), and each host of a fleet remembers only the
// signatures it accepted itself. So a request an agent signed for alpha,
// captured on its way and sent to beta instead, is refused by beta
// (invalid_signature; the detail, naming alpha, in beta's log) and changes
// nothing, while alpha accepts
// it once; the agent's request signed for beta is accepted by beta.
func TestSignedRequestsAreForOneHost(t *testing.T) {
	dsn, key := pgtest.NewDatabase(t), kintest.WithLogKeyDir(filepath.Join(t.TempDir(), "log-key"))
	a := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("alpha"), kintest.WithHTTP(), key)
	b := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("beta"), kintest.WithHTTP(), key)
	kintest.WaitFor(t, 20*time.Second, "beta to see alpha's announced address", func() bool {
		hs, err := b.Client.Hosts(ctx)
		if err != nil {
			return false
		}
		for _, h := range hs {
			if h.Name == "alpha" && h.Address == a.HTTPAddr() {
				return true
			}
		}
		return false
	})
	psA := "http://" + a.HTTPAddr()
	lead := spawnWithToken(t, a, "lead", 0, kinJWKS(t, psA, personserver.PathAgentJWKS))
	children := func() int {
		t.Helper()
		as, err := a.Client.Agents(ctx, kin.AgentFilter{Parent: lead.ID})
		if err != nil {
			t.Fatal(err)
		}
		return len(as)
	}
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"spawn_agent","arguments":{"command":["/bin/sh","-c","exec sleep 600"],"grace":"0s"}}}`)
	captured := signPost(t, psA+daemon.PathMCP, body, lead.signer.Key, lead.token, time.Now())
	toBeta := captured
	toBeta.url = "http://" + b.HTTPAddr() + daemon.PathMCP
	toBeta.host = a.HTTPAddr() // as signed: the bytes on the wire, sent to beta
	// (Without the check beta answered 200 and spawned a second child.)
	status, sigErr, err := toBeta.send()
	if err != nil || status != http.StatusUnauthorized || !strings.Contains(sigErr, string(httpsig.CodeInvalidSignature)) {
		t.Fatalf("alpha's signed request sent to beta: %d, Signature-Error %q, %v; want 401 invalid_signature", status, sigErr, err)
	}
	if n := children(); n != 0 {
		t.Fatalf("lead has %d children after beta refused; want 0", n)
	}
	if status, sigErr, err := captured.send(); err != nil || status != http.StatusOK {
		t.Fatalf("the signed request sent to alpha, which it was signed for: %d %q %v; want 200", status, sigErr, err)
	}
	if n := children(); n != 1 {
		t.Fatalf("lead has %d children; want 1", n)
	}
	forBeta := signPost(t, "http://"+b.HTTPAddr()+daemon.PathMCP, body, lead.signer.Key, lead.token, time.Now())
	if status, sigErr, err := forBeta.send(); err != nil || status != http.StatusOK {
		t.Fatalf("the agent's request signed for beta, sent to beta: %d %q %v; want 200", status, sigErr, err)
	}
}

// TestCascadeFindsAChildTheHostHasNotSeenYet: a child registered on
// another host a moment before its parent dies is cancelled with it, though
// the parent's host has not yet applied that registration to its lineage
// (its follower of the store held here; under load, a notification on its
// way, or missed until the next poll). Before, the cancellation planned from
// the lineage alone, and the child was left running on the other host
// (CI: TestOwnedChildrenDieAcrossHosts, once).
func TestCascadeFindsAChildTheHostHasNotSeenYet(t *testing.T) {
	dsn, key := pgtest.NewDatabase(t), kintest.WithLogKeyDir(filepath.Join(t.TempDir(), "log-key"))
	a := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("alpha"), key)
	b := kintest.StartDaemon(t, kintest.WithStore(dsn), kintest.WithHostName("beta"), key)
	root := spawnAgent(t, a.Client, "root", 0, "sleep")
	release := a.Daemon.Registry.HoldFollowing()
	t.Cleanup(release) // before the daemons stop
	child := spawnAgent(t, b.Client, "child", root.ID, "sleep", func(r *kin.SpawnRequest) { r.Host = "beta" })
	if child.Host != "beta" {
		t.Fatalf("the child runs on %q, want beta", child.Host)
	}
	if err := syscall.Kill(root.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 15*time.Second, "the child's process gone and its end recorded cancelled", func() bool {
		got, err := b.Client.Agent(ctx, child.ID)
		return err == nil && got.State == kin.StateCancelled && !got.EndedAt.IsZero() && syscall.Kill(child.PID, 0) != nil
	})
}
