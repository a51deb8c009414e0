package daemon_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// jsonSpan is what stdouttrace writes of a span, as far as the tests look.
type jsonSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
	Status struct{ Code string }
}

func (s jsonSpan) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			switch v := a.Value.Value.(type) {
			case float64:
				return strconv.FormatInt(int64(v), 10)
			case string:
				return v
			}
		}
	}
	return ""
}

func readSpans(t *testing.T, path string) []jsonSpan {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []jsonSpan
	dec := json.NewDecoder(bufio.NewReader(f))
	for dec.More() {
		var s jsonSpan
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("spans file: %v", err)
		}
		out = append(out, s)
	}
	return out
}

func withTraces(v string) kintest.Option { return func(c *daemon.Config) { c.Traces = v } }

// TestTraceSpansFollowLineage: with file:PATH, each spawn and registration
// is a span whose parent is its parent agent's span, all of a tree in one
// trace, also across a restart of the daemon; a refused spawn is an error
// span under its would-be parent.
func TestTraceSpansFollowLineage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	home := kintest.TempHome(t)
	d := kintest.StartDaemon(t, kintest.WithHome(home), withTraces("file:"+path))
	root := spawnAgent(t, d.Client, "root", 0, "sleep")
	mid := spawnAgent(t, d.Client, "mid", root.ID, "sleep")
	leaf := register(t, d.Client, kin.RegisterRequest{Name: "leaf", Parent: mid.ID})
	other := register(t, d.Client, kin.RegisterRequest{Name: "other", Responsible: "y"})
	if _, err := d.Client.SetGovernor(ctx, "max_generation_depth", strconv.Itoa(leaf.Generation)); err != nil {
		t.Fatal(err)
	}
	_, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "too-deep", Parent: leaf.ID})
	wantCode(t, err, kin.ECodeSpawnDepth)
	if err := d.Close(); err != nil { // flushes the spans
		t.Fatal(err)
	}

	spans := readSpans(t, path)
	byAgent := map[string]jsonSpan{}
	var refused []jsonSpan
	for _, s := range spans {
		if id := s.attr("kin.agent.id"); id != "" {
			byAgent[id] = s
		} else {
			refused = append(refused, s)
		}
	}
	if len(byAgent) != 4 || len(refused) != 1 {
		t.Fatalf("spans = %+v", spans)
	}
	get := func(a *kin.Agent) jsonSpan {
		t.Helper()
		s, ok := byAgent[a.ID.String()]
		if !ok {
			t.Fatalf("no span of agent %d (%s)", a.ID, a.Name)
		}
		return s
	}
	sr, sm, sl, so := get(root), get(mid), get(leaf), get(other)
	if sr.Name != "kin.spawn" || sm.Name != "kin.spawn" || sl.Name != "kin.register" || so.Name != "kin.register" {
		t.Errorf("span names %s %s %s %s", sr.Name, sm.Name, sl.Name, so.Name)
	}
	zero := "0000000000000000"
	if sr.Parent.SpanID != zero && sr.Parent.SpanID != "" {
		t.Errorf("the root's span has a parent: %+v", sr.Parent)
	}
	if sm.Parent.SpanID != sr.SpanContext.SpanID || sl.Parent.SpanID != sm.SpanContext.SpanID {
		t.Errorf("parents: mid's %s, root's span %s; leaf's %s, mid's span %s",
			sm.Parent.SpanID, sr.SpanContext.SpanID, sl.Parent.SpanID, sm.SpanContext.SpanID)
	}
	tid := sr.SpanContext.TraceID
	for _, s := range []jsonSpan{sm, sl, refused[0]} {
		if s.SpanContext.TraceID != tid {
			t.Errorf("%s %s: trace %s, want the root's %s", s.Name, s.attr("kin.agent.name"), s.SpanContext.TraceID, tid)
		}
	}
	if so.SpanContext.TraceID == tid {
		t.Error("another tree shares the trace")
	}
	if sl.attr("kin.agent.name") != "leaf" || sl.attr("kin.agent.generation") != strconv.Itoa(leaf.Generation) ||
		sl.attr("kin.parent") != mid.ID.String() || sl.attr("kin.agent.responsible") != leaf.Responsible {
		t.Errorf("leaf's attributes: %+v", sl.Attributes)
	}
	if r := refused[0]; r.Parent.SpanID != sl.SpanContext.SpanID || r.Status.Code != "Error" ||
		r.attr("kin.error.code") != string(kin.ECodeSpawnDepth) || r.attr("kin.agent.name") != "too-deep" {
		t.Errorf("refused span: %+v", r)
	}

	// A new daemon on the same home derives the same ids: a child
	// registered under other (no process: the shutdown left it be) is in
	// other's trace, under other's span.
	d2 := kintest.StartDaemon(t, kintest.WithHome(home), withTraces("file:"+path))
	late := register(t, d2.Client, kin.RegisterRequest{Name: "late", Parent: other.ID})
	// A spawn refused before the registry (no command) is an error span too.
	_, err = d2.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "no-command", Parent: other.ID}})
	wantCode(t, err, kin.ECodeInvalid)
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	var found, invalid bool
	for _, s := range readSpans(t, path) {
		if s.attr("kin.agent.name") == "no-command" {
			invalid = true
			if s.Name != "kin.spawn" || s.Status.Code != "Error" || s.attr("kin.error.code") != string(kin.ECodeInvalid) ||
				s.SpanContext.TraceID != so.SpanContext.TraceID || s.Parent.SpanID != so.SpanContext.SpanID {
				t.Errorf("invalid spawn's span: %+v", s)
			}
		}
		if s.attr("kin.agent.id") == late.ID.String() {
			found = true
			if s.SpanContext.TraceID != so.SpanContext.TraceID || s.Parent.SpanID != so.SpanContext.SpanID {
				t.Errorf("after a restart: trace %s parent %s, want %s %s", s.SpanContext.TraceID, s.Parent.SpanID, so.SpanContext.TraceID, so.SpanContext.SpanID)
			}
		}
	}
	if !found {
		t.Error("no span of the agent registered after the restart")
	}
	if !invalid {
		t.Error("no span of the spawn refused for its missing command")
	}
}

// TestTracesOffWritesNothing: the default runs no tracer; a bad setting is
// refused at start.
func TestTracesOffWritesNothing(t *testing.T) {
	d := kintest.StartDaemon(t)
	if d.Config.Traces != "" || d.TracesEnabled() {
		t.Fatalf("traces on by default: %q", d.Config.Traces)
	}
	register(t, d.Client, kin.RegisterRequest{Name: "quiet", Responsible: "x"})
	for _, bad := range []string{"on", "file:", "stdout", "otlp:x"} {
		c := daemon.Config{Home: "/h", Traces: bad}
		if err := c.Validate(); err == nil {
			t.Errorf("traces %q accepted", bad)
		}
	}
	for _, good := range []string{"", "off", "otlp", "file:/tmp/x.jsonl"} {
		c := daemon.Config{Home: "/h", Traces: good}
		if err := c.Validate(); err != nil {
			t.Errorf("traces %q: %v", good, err)
		}
	}
}
