package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/aauth"
	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// Issue 21: quotas on everything an agent makes kin write.

// quotaProfile writes a profile with the given quotas (JSON) and returns
// its path.
func quotaProfile(t testing.TB, quotas string) string {
	return profileFile(t, `{"name": "quotas", "max_generation_depth": 10, "quotas": `+quotas+`}`)
}

// profileFile writes a governor profile (JSON) for a test's daemon and
// returns its path.
func profileFile(t testing.TB, profile string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(path, []byte(profile), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// logBytesOnDisk is the size of every file of agent id's log.
func logBytesOnDisk(t testing.TB, home string, id kin.AgentID) (int64, []string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(home, "logs", id.String()+".log*"))
	var n int64
	for _, f := range files {
		if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n, files
}

func logTail(t testing.TB, svc kin.Service, id kin.AgentID, tail int64) string {
	t.Helper()
	var buf bytes.Buffer
	if err := svc.Logs(ctx, kin.LogsRequest{ID: id, Tail: tail}, func(b []byte) error { buf.Write(b); return nil }); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestLogFloodIsBounded is the 1 GiB in 12 s: an agent writes 1 GiB
// to stdout, then a marker. Afterwards at most log_bytes × (1 + log_keep)
// of it is on disk, kin logs still shows the tail ending with the marker,
// and the pipe is gone.
func TestLogFloodIsBounded(t *testing.T) {
	const logBytes, keep = 1 << 20, 2
	d := kintest.StartDaemon(t, kintest.WithProfile(quotaProfile(t, fmt.Sprintf(`{"log_bytes": %d, "log_keep": %d}`, logBytes, keep))))
	a, err := d.Client.Spawn(ctx, kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: "flood", Responsible: "Dr. Schmidt"},
		Command:         []string{"/bin/sh", "-c", "head -c 1073741824 /dev/zero; echo; echo END-OF-FLOOD"},
	})
	if err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 2*time.Minute, "the flood to end", func() bool {
		got, err := d.Client.Agent(ctx, a.ID)
		return err == nil && !got.EndedAt.IsZero()
	})
	n, files := logBytesOnDisk(t, d.Home, a.ID)
	if n > logBytes*(1+keep) || len(files) != 1+keep {
		t.Fatalf("%d bytes of log on disk in %v; the quota is %d bytes in %d files", n, files, logBytes*(1+keep), 1+keep)
	}
	if tail := logTail(t, d.Client, a.ID, 100); !strings.HasSuffix(tail, "\nEND-OF-FLOOD\n") {
		t.Fatalf("kin logs --tail 100 = %q", tail)
	}
	whole := logTail(t, d.Client, a.ID, 0)
	if int64(len(whole)) != n || strings.Trim(whole, "\x00") != "\nEND-OF-FLOOD\n" {
		t.Fatalf("kin logs read %d bytes of the %d on disk, or not the flood's end", len(whole), n)
	}
	if _, err := os.Lstat(filepath.Join(d.Home, "logs", a.ID.String()+".log.pipe")); !os.IsNotExist(err) {
		t.Fatalf("the agent's pipe is left: %v", err)
	}
}

// TestLogSurvivesDaemonRestart: an agent keeps writing while its daemon is
// killed (-9) and another starts on the same home. What it wrote while no
// daemon read it waited in its pipe; the new daemon drains it into the
// same log, rotates it within the quota, and kin logs --follow goes on
// across the rotation: the log holds every line once, in order.
func TestLogSurvivesDaemonRestart(t *testing.T) {
	const logBytes, keep, lines = 64 << 10, 1, 10_000 // 98,899 bytes: one rotation
	prof := quotaProfile(t, fmt.Sprintf(`{"log_bytes": %d, "log_keep": %d}`, logBytes, keep))
	home := kintest.TempHome(t)
	cmd := startDaemonProcessEnv(t, home, "KIN_TEST_DAEMON_PROFILE="+prof)
	c, err := client.New(client.Config{Socket: filepath.Join(home, daemon.SocketName)})
	if err != nil {
		t.Fatal(err)
	}
	// Numbered lines, 200 every 50 ms, then DONE, then it waits.
	a, err := c.Spawn(ctx, kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: "writer", Responsible: "Dr. Schmidt"},
		Command:         []string{"/bin/sh", "-c", fmt.Sprintf(`i=0; while [ $i -lt %d ]; do i=$((i+1)); echo "line $i"; [ $((i %% 200)) = 0 ] && sleep 0.05; done; echo DONE; exec sleep 1000000`, lines)},
	})
	if err != nil {
		t.Fatal(err)
	}
	lastLine := func(svc kin.Service) int {
		ls := strings.Split(strings.TrimSpace(logTail(t, svc, a.ID, 200)), "\n")
		n, _ := strconv.Atoi(strings.TrimPrefix(ls[len(ls)-1], "line "))
		return n
	}
	// Another agent, which dies while no daemon runs: its pipe is left
	// behind until the next daemon finds it lost.
	gone := spawnAgent(t, c, "gone", 0, "sleep")
	gonePipe := filepath.Join(home, "logs", gone.ID.String()+".log.pipe")
	kintest.WaitFor(t, 20*time.Second, "2,000 lines before the kill", func() bool { return lastLine(c) >= 2000 })
	c.Close()
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if !alive(a.PID) {
		t.Fatal("the agent died with its daemon")
	}
	syscall.Kill(gone.PID, syscall.SIGKILL)
	kintest.WaitFor(t, 5*time.Second, "gone to die", func() bool { return !alive(gone.PID) })
	if _, err := os.Lstat(gonePipe); err != nil {
		t.Fatalf("the pipe of an agent that died while no daemon ran: %v", err)
	}

	d := kintest.StartDaemon(t, kintest.WithHome(home), kintest.WithProfile(prof))
	if got, _ := d.Client.Agent(ctx, a.ID); !got.Running() {
		t.Fatalf("not re-adopted: %+v", got)
	}
	// The restart checks its agents in the background; the lost one's
	// pipe goes once that check is over.
	kintest.WaitFor(t, 20*time.Second, "the pipe of an agent lost while no daemon ran to be removed", func() bool {
		_, err := os.Lstat(gonePipe)
		return os.IsNotExist(err)
	})
	// Follow from the end as it is now, to DONE: consecutive lines.
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, w := io.Pipe()
	go func() {
		w.CloseWithError(d.Client.Logs(fctx, kin.LogsRequest{ID: a.ID, Tail: 1, Follow: true}, func(b []byte) error { _, err := w.Write(b); return err }))
	}()
	sc := bufio.NewScanner(r)
	sc.Scan() // the rest of the line the tail began in
	prev := -1
	for sc.Scan() && sc.Text() != "DONE" {
		n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "line "))
		if err != nil || prev >= 0 && n != prev+1 {
			t.Fatalf("followed %q after line %d: lines lost", sc.Text(), prev)
		}
		prev = n
	}
	if sc.Text() != "DONE" || prev != lines {
		t.Fatalf("following stopped after line %d (%q): %v", prev, sc.Text(), sc.Err())
	}
	cancel()
	r.Close()
	// The whole log: every line once, across the kill, the restart and
	// the rotation; within the quota.
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	want.WriteString("DONE\n")
	if got := logTail(t, d.Client, a.ID, 0); got != want.String() {
		t.Fatalf("the log has %d bytes, want %d: lines lost or repeated across the restart", len(got), want.Len())
	}
	if n, files := logBytesOnDisk(t, home, a.ID); n > logBytes*(1+keep) || len(files) != 1+keep+1 { // .log, .log.1, .log.pipe
		t.Fatalf("%d bytes of log on disk in %v; the quota is %d", n, files, logBytes*(1+keep))
	}
	if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: a.ID}); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 10*time.Second, "the pipe to be removed", func() bool {
		_, err := os.Lstat(filepath.Join(home, "logs", a.ID.String()+".log.pipe"))
		return os.IsNotExist(err)
	})
}

// floodResult is what a flood agent wrote: accepted, refused (rate
// limited), anything else, the first retry_after, and seconds from the
// first request to the last.
type floodResult struct {
	ok, limited, other int
	retry, elapsed     float64
	otherErr           string
}

func runFlood(args []string, c *client.Client, out func(string, ...any)) {
	kind := args[0]
	n, _ := strconv.Atoi(args[1])
	size, _ := strconv.Atoi(args[2])
	text := strings.Repeat("m", size)
	parent := os.Getenv("KIN_PARENT_ID")
	var r floodResult
	began := time.Now()
	for range n {
		var err error
		if kind == "messages" {
			_, err = c.Send(ctx, kin.SendRequest{To: parent, Text: text})
		} else {
			_, err = c.Usage(ctx, kin.UsageRequest{Tokens: 1})
		}
		var ke *kin.Error
		switch {
		case err == nil:
			r.ok++
		case errors.As(err, &ke) && ke.Code == kin.ECodeRateLimited:
			if r.limited == 0 {
				r.retry = ke.RetryAfter
			}
			r.limited++
		default:
			r.other++
			r.otherErr = err.Error()
		}
	}
	r.elapsed = time.Since(began).Seconds()
	out("flood ok=%d limited=%d other=%d retry=%g elapsed=%g err=%q", r.ok, r.limited, r.other, r.retry, r.elapsed, r.otherErr)
}

func readFlood(t *testing.T, path string) floodResult {
	t.Helper()
	var line string
	// 3,000 requests of 60 KB: seconds on a quiet machine, more under -race.
	kintest.WaitFor(t, 2*time.Minute, "the flood's result in "+path, func() bool {
		b, _ := os.ReadFile(path)
		line = string(b)
		return strings.Contains(line, "flood ok=")
	})
	var r floodResult
	if _, err := fmt.Sscanf(line[strings.Index(line, "flood ok="):], "flood ok=%d limited=%d other=%d retry=%g elapsed=%g err=%q",
		&r.ok, &r.limited, &r.other, &r.retry, &r.elapsed, &r.otherErr); err != nil {
		t.Fatalf("flood result %q: %v", line, err)
	}
	return r
}

// TestMessageFloodIsRefused is the 3,000 messages of 60 KB: past
// the burst and the rate they are refused (rate_limited, with a
// retry_after), and the database grows by what the accepted ones take, not
// by 180 MB. A message over quotas.message_bytes is refused as invalid.
func TestMessageFloodIsRefused(t *testing.T) {
	const rate, burst = 2.0, 20
	d := kintest.StartDaemon(t, kintest.WithProfile(quotaProfile(t, fmt.Sprintf(`{"message_bytes": 65536, "messages": {"per_second": %g, "burst": %d}}`, rate, burst))))
	out := outPath(t)
	parent := spawnAgent(t, d.Client, "parent", 0, "sleep")
	dbBefore := storeBytes(t, d)
	spawnAgent(t, d.Client, "flooder", parent.ID, "flood messages 3000 60000", withEnv("KINTEST_OUT="+out))
	r := readFlood(t, out)
	allowed := burst + int(rate*r.elapsed) + 1
	if r.ok < burst || r.ok > allowed || r.other != 0 || r.ok+r.limited != 3000 {
		t.Fatalf("flood: %+v; want between %d and %d accepted (burst + rate × %.1fs), the rest rate_limited", r, burst, allowed, r.elapsed)
	}
	if r.retry <= 0 || r.retry > 1/rate+0.01 {
		t.Fatalf("retry_after = %g, want in (0, %g]", r.retry, 1/rate)
	}
	// Every accepted message is one event of 60,000 bytes of text; SQLite
	// keeps it in the WAL and, after a checkpoint, in the database: at
	// most twice, plus pages and the other events of the test (its two
	// agents' registrations and starts), 1 MiB.
	grew := storeBytes(t, d) - dbBefore
	if limit := int64(r.ok)*2*(60_000+8<<10) + 1<<20; grew > limit {
		t.Fatalf("the database grew by %d bytes for %d accepted messages; at most %d allowed", grew, r.ok, limit)
	}
	t.Logf("%d accepted, %d refused in %.2fs; the database grew by %d bytes (%.0f per accepted message)", r.ok, r.limited, r.elapsed, grew, float64(grew)/float64(r.ok))
	msgs := events(t, d.Client, kin.EventFilter{Types: []string{kin.EventAgentMessage}})
	if len(msgs) != r.ok {
		t.Fatalf("%d message events for %d accepted", len(msgs), r.ok)
	}
	// The operator is not limited, and a message over message_bytes is
	// invalid, naming the quota.
	big := strings.Repeat("x", 64<<10+1)
	_, err := d.Client.ActingAs(parent.ID.String()).Send(ctx, kin.SendRequest{To: "flooder", Text: big})
	if kin.ErrorCodeOf(err) != kin.ECodeInvalid {
		t.Fatalf("a message over the limit: %v", err)
	}
	for range 3 * burst {
		if _, err := d.Client.Send(ctx, kin.SendRequest{To: "parent", Text: "from the operator"}); err != nil {
			t.Fatalf("the operator was limited: %v", err)
		}
	}
}

// TestMessageSizeQuota: quotas.message_bytes refuses a larger body from an
// agent as invalid, naming the key, with nothing written.
func TestMessageSizeQuota(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithProfile(quotaProfile(t, `{"message_bytes": 1000}`)))
	parent := spawnAgent(t, d.Client, "parent", 0, "sleep")
	child := spawnAgent(t, d.Client, "child", parent.ID, "sleep")
	as := d.Client.ActingAs(child.ID.String())
	if _, err := as.Send(ctx, kin.SendRequest{To: "parent", Text: strings.Repeat("a", 1000)}); err != nil {
		t.Fatal(err)
	}
	_, err := as.Send(ctx, kin.SendRequest{To: "parent", Text: strings.Repeat("a", 1001)})
	if kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.Contains(err.Error(), "quotas.message_bytes") {
		t.Fatalf("1001 bytes: %v", err)
	}
	if msgs := events(t, d.Client, kin.EventFilter{Types: []string{kin.EventAgentMessage}}); len(msgs) != 1 {
		t.Fatalf("%d messages recorded, want 1", len(msgs))
	}
}

// TestUsageFloodIsRateLimited: usage reports past quotas.reports are
// refused with retry_after, as HTTP 429 with Retry-After, and the SDK
// hands the retry_after back in a *kin.Error.
func TestUsageFloodIsRateLimited(t *testing.T) {
	const rate, burst = 5.0, 10
	d := kintest.StartDaemon(t, kintest.WithProfile(quotaProfile(t, fmt.Sprintf(`{"reports": {"per_second": %g, "burst": %d}}`, rate, burst))))
	out := outPath(t)
	a := spawnAgent(t, d.Client, "reporter", 0, "flood usage 3000 0", withEnv("KINTEST_OUT="+out))
	r := readFlood(t, out)
	if allowed := burst + int(rate*r.elapsed) + 1; r.ok < burst || r.ok > allowed || r.other != 0 || r.retry <= 0 {
		t.Fatalf("usage flood: %+v; want between %d and %d accepted, the rest rate_limited with retry_after > 0", r, burst, allowed)
	}
	if us := events(t, d.Client, kin.EventFilter{Types: []string{kin.EventAgentUsage}}); len(us) != r.ok {
		t.Fatalf("%d usage events for %d accepted", len(us), r.ok)
	}
	// Over HTTP: 429 and Retry-After (the operator acting as the agent is
	// that agent; the operator itself is not limited).
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.SocketPath())
	}}}
	var resp *http.Response
	for range 2 * burst {
		req, _ := http.NewRequest("POST", "http://kin/v1/usage", strings.NewReader(`{"tokens": 1}`))
		req.Header.Set(kin.HeaderActAs, a.ID.String())
		req.Header.Set("Content-Type", "application/json")
		var err error
		if resp, err = hc.Do(req); err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Logf("%s: %s", resp.Status, body)
			break
		}
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("past the quota over HTTP: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	for range 3 * burst {
		if _, err := d.Client.Usage(ctx, kin.UsageRequest{Agent: a.ID, Tokens: 1}); err != nil {
			t.Fatalf("the operator was limited: %v", err)
		}
	}
	// Heartbeats count as reports too.
	hb := d.Client.ActingAs(a.ID.String())
	var err error
	for range 3 * burst {
		if _, err = hb.Heartbeat(ctx, kin.HeartbeatRequest{}); err != nil {
			break
		}
	}
	var ke *kin.Error
	if !errors.As(err, &ke) || ke.Code != kin.ECodeRateLimited || ke.RetryAfter <= 0 || !strings.Contains(ke.Message, "quotas.reports") {
		t.Fatalf("a heartbeat flood: %v", err)
	}
}

// TestAuthTokenFloodIsRateLimited: every answer of the person server's
// /auth-token to a signed request is an event (issued or refused); past
// its reports quota an agent gets 429 rate_limited, and nothing is
// recorded.
func TestAuthTokenFloodIsRateLimited(t *testing.T) {
	const rate, burst = 1.0, 5
	d := kintest.StartDaemon(t, kintest.WithHTTP(), kintest.WithProfile(quotaProfile(t, fmt.Sprintf(`{"reports": {"per_second": %g, "burst": %d}}`, rate, burst))))
	ps := "http://" + d.HTTPAddr()
	top := spawnWithToken(t, d, "planner", 0, kinJWKS(t, ps, "/.well-known/jwks.json"))
	codes := map[string]int{}
	began := time.Now()
	for range 50 {
		_, err := top.signer.RequestAuthToken(ctx, ps, aauth.AuthTokenRequest{ResourceToken: "not.a.token"}) // refused, recorded
		if code := problemCode(err); code == "rate_limited" {
			codes[code]++
		} else {
			codes["other"]++
		}
	}
	elapsed := time.Since(began).Seconds()
	refused := events(t, d.Client, kin.EventFilter{Types: []string{kin.EventTokenRefused}})
	if allowed := burst + int(rate*elapsed) + 1; codes["other"] < burst || codes["other"] > allowed ||
		codes["rate_limited"] != 50-codes["other"] || len(refused) != codes["other"] {
		t.Fatalf("answers %v, %d token.refused events; want at most %d recorded, the rest rate_limited", codes, len(refused), allowed)
	}
}
