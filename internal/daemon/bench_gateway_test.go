package daemon_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/fakemodel"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/kin"
)

// Gateway benchmark sizes: per iteration, latencyCalls sequential calls
// each way (direct and through kin, alternating), and one round of
// benchStreams concurrent streams, streamsEach in a row, each way.
const (
	latencyCalls = 100
	benchStreams = 200
	streamsEach  = 3
	// pacedDelay is the gap before each chunk of the "paced" streams: a
	// provider's pace, one token a chunk at about 67 tokens a second
	// (gpt-4o's median measured at 65.5 tokens/s in "GPT-4o tokens per
	// second comparable to gpt-3.5-turbo", community.openai.com/t/768559;
	// Claude Sonnet 4.5 at 78, GPT-5.4 at 90 in forg.pro's dataset).
	// Without the first token's wait (0.3-1 s at providers), which would
	// only lengthen the streams.
	pacedDelay = 15 * time.Millisecond
	// longChunks is the content chunks of a "long" paced stream: a reply
	// of 100 tokens (1.5 s at pacedDelay), still short of what an agent's
	// call usually writes, and still without the first token's wait.
	longChunks = 100
)

// gatewayTarget is where a benchmark's calls go: the fake upstream
// itself (with its key) or kin's gateway (with an agent's credential).
type gatewayTarget struct {
	name   string
	base   string // up to and without /v1
	key    string
	client *http.Client // kin's: its connections made as the agent's uid (clientFor)
	calls  []time.Duration
	ttfb   []time.Duration
	models []time.Duration
	// streams: completed, the time they took and the CPU the whole
	// process spent meanwhile (user and system: the clients, the fake
	// upstream, and on kin's path kin), per kind.
	fast, slow, paced streamRun
	// steady: the paced kind at a steady 200 streams (steadyStreams);
	// long: the same with replies of longChunks.
	steady, long streamRun
	// The same kinds with the upstream apart (apartRound): the process's
	// CPU is the clients' and, on kin's path, kin's.
	apart map[string]*streamRun
}

// streamRun adds up one kind of stream's rounds.
type streamRun struct {
	n    int
	took time.Duration
	cpu  time.Duration
}

func (s *streamRun) add(n int, took, cpu time.Duration) {
	s.n, s.took, s.cpu = s.n+n, s.took+took, s.cpu+cpu
}

// BenchmarkGateway is the gateway's overhead per call against calling
// the fake upstream directly in the same run: a non-streaming chat
// completion's latency (p50), a streamed one's time to its first byte
// (p50), listing the models (the proxy alone: no admission, no metering),
// and the throughput of 200 concurrent streams: Anthropic message
// streams of 20 chunks 5 ms apart (what a provider's stream looks like:
// the gateway must keep up), OpenAI chat streams with no delay (the
// gateway's own cost, CPU-bound on this machine, where kin and the fake
// share two cores), and Anthropic streams of 20 chunks pacedDelay apart
// (a provider's pace); each kind's 200 streams start together, in waves
// (each worker's next call begins when its last ends). The
// streams200-paced-steady row is the paced kind with the workers' starts
// spread over one stream's length (steadyStreams): 200 streams open at
// all times, beginning and ending at all times as agents' calls do. The
// streams200-paced-long row is the steady one with replies of longChunks
// tokens (1.5 s): the per-call costs (the request, the admission, the
// metering before the last event) weigh less against a longer reply.
// The clients, the fake upstreams and kin share one
// process: each kind also reports the process's CPU per stream, direct
// (clients and upstream) and through kin, and the difference (kin's own
// CPU per stream), a figure the box's other load does not move as it
// moves the throughput.
//
// The "-apart" rows (streams200-KIND-apart-*) are the same three kinds
// with the fake upstreams in a process of their own pinned to a CPU of
// their own, and the benchmark's process (the clients and kin) pinned to
// the other CPU with GOMAXPROCS 1 for their rounds: a provider's CPU is
// not on the host where the agents and kin run, and here it no longer
// takes CPU from the clients or kin. Their CPU per stream is the
// clients' (direct) and the clients' and kin's (through kin); the
// upstream's is not in it. On PostgreSQL the server is a process of its
// own and is not pinned. (Machines with fewer than 2 CPUs skip them.)
func BenchmarkGateway(b *testing.B) {
	fastOpts := fakemodel.Options{Key: upstreamKey, InputTokens: 10, OutputTokens: 5, Reply: "hello world", NoRecord: true}
	slowOpts := fakemodel.Options{Key: upstreamKey, InputTokens: 10, OutputTokens: 20,
		Reply: strings.Repeat("x", 20), Chunks: 20, ChunkDelay: 5 * time.Millisecond, NoRecord: true}
	pacedOpts := fakemodel.Options{Key: upstreamKey, InputTokens: 10, OutputTokens: 20,
		Reply: strings.Repeat("x", 20), Chunks: 20, ChunkDelay: pacedDelay, NoRecord: true}
	longOpts := pacedOpts
	longOpts.Reply, longOpts.Chunks, longOpts.OutputTokens = strings.Repeat("x", longChunks), longChunks, longChunks
	fast, slow, paced := fakemodel.Start(b, fastOpts), fakemodel.Start(b, slowOpts), fakemodel.Start(b, pacedOpts)
	long := fakemodel.Start(b, longOpts)
	opts := []kintest.Option{kintest.WithHTTP(),
		kintest.WithModelUpstream("openai", "openai", fast.URL, upstreamKey),
		kintest.WithModelUpstream("anthropic", "anthropic", slow.URL, upstreamKey),
		kintest.WithModelUpstream("paced", "anthropic", paced.URL, upstreamKey),
		kintest.WithModelUpstream("long", "anthropic", long.URL, upstreamKey)}
	// The same upstreams in a process of their own on the last CPU (kin
	// reaches them as fast-apart/MODEL etc.).
	var apartURLs []string
	hostCPUs, upCPU, apartOK := apartCPUs()
	if apartOK {
		apartURLs = startApartUpstreams(b, upCPU, fastOpts, slowOpts, pacedOpts)
		opts = append(opts,
			kintest.WithModelUpstream("fast-apart", "openai", apartURLs[0], upstreamKey),
			kintest.WithModelUpstream("slow-apart", "anthropic", apartURLs[1], upstreamKey),
			kintest.WithModelUpstream("paced-apart", "anthropic", apartURLs[2], upstreamKey))
	} else {
		b.Log("fewer than 2 CPUs: no -apart rows")
	}
	d := kintest.StartDaemon(b, opts...)
	// The agent whose credential the calls carry (the daemon's cleanup
	// stops it).
	a, err := d.Client.Spawn(ctx, kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: "bench-agent", Responsible: "Dr. Schmidt"},
		Command:         []string{"/bin/sleep", "3600"}})
	if err != nil {
		b.Fatal(err)
	}
	cred := d.ModelCredential(a.ID)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * benchStreams, MaxIdleConns: 4 * benchStreams}}
	b.Cleanup(client.CloseIdleConnections)

	// kin's calls come from the agent's uid where agents run as their own
	// (the gateway binds a credential to it on TCP).
	kinClient := client
	if uid, ok := d.Runner.AgentUID(a.ID); ok {
		kinClient = asUIDWith(uid, 2*benchStreams)
		b.Cleanup(kinClient.CloseIdleConnections)
	}
	direct := &gatewayTarget{name: "direct", base: fast.URL, key: upstreamKey, client: client}
	kinT := &gatewayTarget{name: "kin", base: "http://" + d.HTTPAddr(), key: cred, client: kinClient}
	slowDirect, pacedDirect := slow.URL, paced.URL
	targets := []*gatewayTarget{direct, kinT}

	// Warm both paths (connections, the agent's caches).
	for _, t := range targets {
		if _, err := chatCall(t.client, t.base, t.key, false); err != nil {
			b.Fatalf("%s: %v", t.name, err)
		}
	}
	for b.Loop() {
		for range latencyCalls {
			for _, t := range targets {
				lat, err := chatCall(t.client, t.base, t.key, false)
				if err != nil {
					b.Fatalf("%s call: %v", t.name, err)
				}
				t.calls = append(t.calls, lat)
				ttfb, err := chatCall(t.client, t.base, t.key, true)
				if err != nil {
					b.Fatalf("%s stream: %v", t.name, err)
				}
				t.ttfb = append(t.ttfb, ttfb)
				lat, err = modelsCall(t.client, t.base, t.key)
				if err != nil {
					b.Fatalf("%s models: %v", t.name, err)
				}
				t.models = append(t.models, lat)
			}
		}
		for _, t := range targets {
			run, err := concurrentStreams(t.client, t.base, t.key, func(c *http.Client, base, key string) error {
				_, err := chatCall(c, base, key, true)
				return err
			})
			if err != nil {
				b.Fatalf("%s fast streams: %v", t.name, err)
			}
			t.fast.add(run.n, run.took, run.cpu)
			base := t.base
			if t == direct {
				base = slowDirect
			}
			run, err = concurrentStreams(t.client, base, t.key, func(c *http.Client, base, key string) error {
				return messagesStream(c, base, key, "claude-3-5-haiku-latest")
			})
			if err != nil {
				b.Fatalf("%s slow streams: %v", t.name, err)
			}
			t.slow.add(run.n, run.took, run.cpu)
			// kin sends "paced/NAME" to the paced upstream as NAME.
			base, model := t.base, "paced/claude-3-5-haiku-latest"
			if t == direct {
				base, model = pacedDirect, "claude-3-5-haiku-latest"
			}
			run, err = concurrentStreams(t.client, base, t.key, func(c *http.Client, base, key string) error {
				return messagesStream(c, base, key, model)
			})
			if err != nil {
				b.Fatalf("%s paced streams: %v", t.name, err)
			}
			t.paced.add(run.n, run.took, run.cpu)
			run, err = steadyStreams(t.client, base, t.key, pacedDelay*20, func(c *http.Client, base, key string) error {
				return messagesStream(c, base, key, model)
			})
			if err != nil {
				b.Fatalf("%s steady paced streams: %v", t.name, err)
			}
			t.steady.add(run.n, run.took, run.cpu)
			// kin sends "long/NAME" to the long upstream as NAME.
			base, model = t.base, "long/claude-3-5-haiku-latest"
			if t == direct {
				base, model = long.URL, "claude-3-5-haiku-latest"
			}
			run, err = steadyStreams(t.client, base, t.key, pacedDelay*longChunks, func(c *http.Client, base, key string) error {
				return messagesStream(c, base, key, model)
			})
			if err != nil {
				b.Fatalf("%s steady long streams: %v", t.name, err)
			}
			t.long.add(run.n, run.took, run.cpu)
		}
		if apartOK {
			apartRound(b, targets, direct, apartURLs, hostCPUs)
		}
	}
	b.ReportMetric(0, "ns/op") // an iteration is a batch: the figures say it
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	for _, m := range []struct {
		name string
		of   func(*gatewayTarget) []time.Duration
	}{{"call", func(t *gatewayTarget) []time.Duration { return t.calls }}, {"ttfb", func(t *gatewayTarget) []time.Duration { return t.ttfb }},
		// The proxy alone: kin forwards GET /v1/models without admitting
		// or metering it.
		{"models", func(t *gatewayTarget) []time.Duration { return t.models }}} {
		dp, kp := percentile(m.of(direct), 0.5), percentile(m.of(kinT), 0.5)
		b.ReportMetric(us(dp), m.name+"-direct-p50-µs")
		b.ReportMetric(us(kp), m.name+"-kin-p50-µs")
		b.ReportMetric(us(kp-dp), m.name+"-added-p50-µs")
		b.ReportMetric(us(percentile(m.of(kinT), 0.99)-percentile(m.of(direct), 0.99)), m.name+"-added-p99-µs")
	}
	rows := []struct {
		name string
		of   func(*gatewayTarget) streamRun
	}{
		{"streams200-slow", func(t *gatewayTarget) streamRun { return t.slow }},
		{"streams200-fast", func(t *gatewayTarget) streamRun { return t.fast }},
		{"streams200-paced", func(t *gatewayTarget) streamRun { return t.paced }},
		{"streams200-paced-steady", func(t *gatewayTarget) streamRun { return t.steady }},
		{"streams200-paced-long", func(t *gatewayTarget) streamRun { return t.long }},
	}
	if apartOK {
		for _, kind := range []string{"slow", "fast", "paced"} {
			rows = append(rows, struct {
				name string
				of   func(*gatewayTarget) streamRun
			}{"streams200-" + kind + "-apart", func(t *gatewayTarget) streamRun { return *t.apart[kind] }})
		}
	}
	for _, s := range rows {
		d, k := s.of(direct), s.of(kinT)
		dr, kr := float64(d.n)/d.took.Seconds(), float64(k.n)/k.took.Seconds()
		b.ReportMetric(dr, s.name+"-direct-per-s")
		b.ReportMetric(kr, s.name+"-kin-per-s")
		b.ReportMetric(100*(1-kr/dr), s.name+"-loss-%")
		// CPU per stream: direct is the clients' and the upstream's (the
		// clients' alone apart), kin's path adds kin's own.
		dc, kc := us(d.cpu)/float64(d.n), us(k.cpu)/float64(k.n)
		b.ReportMetric(dc, s.name+"-direct-cpu-us/stream")
		b.ReportMetric(kc, s.name+"-kin-cpu-us/stream")
		b.ReportMetric(kc-dc, s.name+"-added-cpu-us/stream")
	}
}

// chatCall makes one chat completion, streamed or not. Its duration is
// the whole call's (not streamed) or the time to the first byte of the
// body (streamed; the rest is read, not timed).
func chatCall(c *http.Client, base, key string, stream bool) (time.Duration, error) {
	return chatCallOf(c, base, key, "gpt-4o-mini", stream)
}

// chatCallOf is chatCall naming model.
func chatCallOf(c *http.Client, base, key, model string, stream bool) (time.Duration, error) {
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
	if stream {
		body = `{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	}
	req, err := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	if !stream {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadByte(); err != nil {
		return 0, err
	}
	ttfb := time.Since(t0)
	rest, err := io.ReadAll(br)
	if err != nil {
		return 0, err
	}
	if !strings.Contains(string(rest), "data: [DONE]") {
		return 0, fmt.Errorf("a stream without its end: %s", rest)
	}
	return ttfb, nil
}

// modelsCall lists the models and reads the answer whole.
func modelsCall(c *http.Client, base, key string) (time.Duration, error) {
	req, err := http.NewRequest("GET", base+"/v1/models", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return time.Since(t0), nil
}

// messagesStream makes one streamed Anthropic message of model and reads
// it whole.
func messagesStream(c *http.Client, base, key, model string) error {
	req, err := http.NewRequest("POST", base+"/v1/messages",
		strings.NewReader(`{"model":"`+model+`","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		return err
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || !strings.Contains(string(b), "event: message_stop") {
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return nil
}

// concurrentStreams runs benchStreams workers, each making streamsEach
// calls in a row, and returns how many completed, the time it took and
// the process's CPU meanwhile.
func concurrentStreams(c *http.Client, base, key string, call func(*http.Client, string, string) error) (streamRun, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	t0, cpu0 := time.Now(), proctest.CPU()
	for range benchStreams {
		wg.Go(func() {
			for range streamsEach {
				if err := call(c, base, key); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return streamRun{n: benchStreams * streamsEach, took: time.Since(t0), cpu: proctest.CPU() - cpu0}, first
}

// steadyStreams is concurrentStreams at a steady benchStreams streams:
// the workers start spread evenly over spread (a stream's length at its
// provider's pace), so that their streams begin and end at all times as
// agents' calls do, not in waves of 200 together, and each makes
// streamsEach+1 calls in a row. The rate is counted between the last
// worker's start and the first worker's end, while all benchStreams are
// open: the streams that ended in that window, its length, and the
// process's CPU over it.
func steadyStreams(c *http.Client, base, key string, spread time.Duration, call func(*http.Client, string, string) error) (streamRun, error) {
	var (
		wg             sync.WaitGroup
		mu             sync.Mutex
		first          error
		started, ended int
		from, to       time.Time
		cpuFrom, cpuTo time.Duration
		ends           []time.Time
	)
	for i := range benchStreams {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * spread / benchStreams) // the spread itself, not a wait for a condition
			mu.Lock()
			if started++; started == benchStreams {
				from, cpuFrom = time.Now(), proctest.CPU()
			}
			mu.Unlock()
			for range streamsEach + 1 {
				if err := call(c, base, key); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					break
				}
				mu.Lock()
				ends = append(ends, time.Now())
				mu.Unlock()
			}
			mu.Lock()
			if ended++; ended == 1 {
				to, cpuTo = time.Now(), proctest.CPU()
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if first != nil {
		return streamRun{}, first
	}
	if !to.After(from) {
		return streamRun{}, fmt.Errorf("a worker ended (%v) before the last started (%v): no window with %d streams open", to, from, benchStreams)
	}
	n := 0
	for _, e := range ends {
		if e.After(from) && !e.After(to) {
			n++
		}
	}
	return streamRun{n: n, took: to.Sub(from), cpu: cpuTo - cpuFrom}, nil
}

// apartCPUs splits the CPUs this process may run on for the -apart rows:
// the last for the upstreams' process, the others for this one (the
// host: the clients and kin); false with fewer than two.
func apartCPUs() (host unix.CPUSet, upstream int, ok bool) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil || all.Count() < 2 {
		return host, 0, false
	}
	upstream = -1
	for cpu := range 1024 { // CPU_SETSIZE: IsSet is false past the set
		if all.IsSet(cpu) {
			upstream = cpu
		}
	}
	host = all
	host.Clear(upstream)
	return host, upstream, true
}

// startApartUpstreams runs fake upstreams answering as opts say in a
// process of their own (this test binary, TestMain's KIN_TEST_FAKEMODELS
// mode) pinned to CPU cpu, and returns their URLs in opts' order. The
// process ends when the test does (its stdin closed; killed by its pid if
// it has not ended 10 s later).
func startApartUpstreams(b *testing.B, cpu int, opts ...fakemodel.Options) []string {
	b.Helper()
	spec, err := json.Marshal(opts)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "KIN_TEST_FAKEMODELS="+string(spec), "KIN_TEST_FAKEMODELS_CPU="+strconv.Itoa(cpu))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	deadline := time.After(30 * time.Second)
	var urls []string
	for len(urls) < len(opts) {
		select {
		case line, ok := <-lines:
			if !ok {
				b.Fatalf("the upstreams' process ended after %d of %d URLs", len(urls), len(opts))
			}
			if !strings.HasPrefix(line, "http://") {
				b.Fatalf("the upstreams' process said %q, not a URL", line)
			}
			urls = append(urls, line)
		case <-deadline:
			b.Fatalf("the upstreams' process gave %d of %d URLs in 30 s", len(urls), len(opts))
		}
	}
	go func() { // the rest of its output, unread, must not block it
		for range lines {
		}
	}()
	return urls
}

// runApartUpstreams is the test binary as the -apart rows' upstreams
// (KIN_TEST_FAKEMODELS: a JSON list of fakemodel.Options; pinned to CPU
// KIN_TEST_FAKEMODELS_CPU with GOMAXPROCS 1): it prints each server's URL
// on a line and serves until its stdin ends.
func runApartUpstreams(spec string) int {
	if s := os.Getenv("KIN_TEST_FAKEMODELS_CPU"); s != "" {
		cpu, err := strconv.Atoi(s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "KIN_TEST_FAKEMODELS_CPU=%q: not a CPU number\n", s)
			return 2
		}
		var set unix.CPUSet
		set.Set(cpu)
		if err := pinThreads(os.Getpid(), &set); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		runtime.GOMAXPROCS(1)
	}
	var opts []fakemodel.Options
	if err := json.Unmarshal([]byte(spec), &opts); err != nil {
		fmt.Fprintf(os.Stderr, "KIN_TEST_FAKEMODELS: %v\n", err)
		return 2
	}
	var servers []*fakemodel.Server
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	for _, o := range opts {
		s, err := fakemodel.Listen("127.0.0.1:0", o)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		servers = append(servers, s)
		fmt.Println(s.URL)
	}
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// pinThreads sets the CPU affinity of every thread of process pid to
// cpus: the walk repeats until it finds no thread it has not set, so a
// thread started meanwhile (which takes its creator's mask) is set too.
func pinThreads(pid int, cpus *unix.CPUSet) error {
	done := map[int]bool{}
	for {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		fresh := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, cpus); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("the affinity of thread %d: %w", tid, err)
			}
			done[tid], fresh = true, true
		}
		if !fresh {
			return nil
		}
	}
}

// apartRound runs the three kinds of stream, each way, against the
// upstreams' own process (urls: fast, slow, paced), this process pinned to
// host with GOMAXPROCS its CPU count meanwhile.
func apartRound(b *testing.B, targets []*gatewayTarget, direct *gatewayTarget, urls []string, host unix.CPUSet) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		b.Fatal(err)
	}
	if err := pinThreads(os.Getpid(), &host); err != nil {
		b.Fatal(err)
	}
	prev := runtime.GOMAXPROCS(host.Count())
	defer func() {
		if err := pinThreads(os.Getpid(), &all); err != nil {
			b.Error(err)
		}
		runtime.GOMAXPROCS(prev)
	}()
	kinds := []struct {
		kind, url, model string
		anthropic        bool
	}{
		{"fast", urls[0], "gpt-4o-mini", false},
		{"slow", urls[1], "claude-3-5-haiku-latest", true},
		{"paced", urls[2], "claude-3-5-haiku-latest", true},
	}
	for _, t := range targets {
		if t.apart == nil {
			t.apart = map[string]*streamRun{}
		}
		for _, k := range kinds {
			// kin sends "KIND-apart/MODEL" to that upstream as MODEL.
			base, model := t.base, k.kind+"-apart/"+k.model
			if t == direct {
				base, model = k.url, k.model
			}
			run, err := concurrentStreams(t.client, base, t.key, func(c *http.Client, base, key string) error {
				if !k.anthropic {
					_, err := chatCallOf(c, base, key, model, true)
					return err
				}
				return messagesStream(c, base, key, model)
			})
			if err != nil {
				b.Fatalf("%s %s streams apart: %v", t.name, k.kind, err)
			}
			if t.apart[k.kind] == nil {
				t.apart[k.kind] = &streamRun{}
			}
			t.apart[k.kind].add(run.n, run.took, run.cpu)
		}
	}
}
