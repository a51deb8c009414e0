package telemetry

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/lineage"
	"github.com/kin-agents/kin/kin"
)

// OpenTelemetry traces (Config.Traces; docs/OBSERVABILITY.md): one span for
// each spawn, registration and restart, whose parent is the span of the
// parent agent's own spawn, so that a tree's trace is its lineage.
//
// Nothing is stored to link them: the ids are derived. A tree's trace id
// is a hash of its root agent's id, an agent's span id a hash of its own,
// both salted with the event log's verifier key (unique to the home, and
// stable across restarts). A child's span starts under its parent's derived
// span context, made remote; an IDGenerator of our own hands the SDK the
// derived ids the context carries.

// Tracer is the daemon's trace pipeline, nil when traces are off.
type Tracer struct {
	tp   *sdktrace.TracerProvider
	tr   trace.Tracer
	salt string
	file *os.File // file:PATH's file, closed after the provider
	lin  *lineage.Tree
	log  *slog.Logger
}

// TracerConfig says where spans go.
type TracerConfig struct {
	// Exporter is "" (no spans: OpenTracer returns nil), "otlp" (OTLP
	// over HTTP, configured by the standard OTEL_EXPORTER_OTLP_*
	// environment) or "file" (JSON lines of spans appended to Path).
	Exporter string
	Path     string
	// Salt makes the derived trace and span ids this daemon's (the log's
	// verifier key).
	Salt          string
	Version, Home string // resource attributes
	Lineage       *lineage.Tree
	Log           *slog.Logger
}

// OpenTracer starts the exporter c names, or returns nil when spans are
// off (every method of a nil Tracer is a no-op).
func OpenTracer(ctx context.Context, c TracerConfig) (*Tracer, error) {
	if c.Exporter == "" {
		c.Log.Info("traces off")
		return nil, nil
	}
	mode, path := c.Exporter, c.Path
	var err error
	t := &Tracer{salt: "kin/" + c.Salt, lin: c.Lineage, log: c.Log}
	var exp sdktrace.SpanExporter
	switch mode {
	case "otlp":
		// OTEL_EXPORTER_OTLP_ENDPOINT, _HEADERS, _TIMEOUT, ... and their
		// _TRACES_ variants configure it.
		exp, err = otlptracehttp.New(ctx)
	case "file":
		t.file, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err == nil {
			exp, err = stdouttrace.New(stdouttrace.WithWriter(t.file))
		}
	}
	if err != nil {
		if t.file != nil {
			t.file.Close()
		}
		return nil, fmt.Errorf("%s exporter: %w", mode, err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "kin"),
		attribute.String("service.version", c.Version),
		attribute.String("kin.home", c.Home),
	))
	if err != nil {
		res = resource.Default()
	}
	t.tp = sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithIDGenerator(derivedIDs{}),
	)
	t.tr = t.tp.Tracer("github.com/kin-agents/kin/internal/daemon") // the scope name spans were always exported under
	c.Log.Info("traces on", "exporter", mode, "path", path, "spans", "kin.spawn, kin.register, kin.restart")
	return t, nil
}

// Close flushes the spans still buffered and stops the exporter.
func (t *Tracer) Close() {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := t.tp.Shutdown(ctx); err != nil {
		t.log.Warn("traces: flush on shutdown", "err", err)
	}
	if t.file != nil {
		if err := t.file.Close(); err != nil {
			t.log.Warn("traces: close file", "err", err)
		}
	}
}

// traceID is the trace of the tree whose root agent is root.
func (t *Tracer) traceID(root kin.AgentID) (id trace.TraceID) {
	h := t.derive("trace", root)
	copy(id[:], h[:])
	if !id.IsValid() {
		id[0] = 1
	}
	return id
}

// spanID is the span of agent id's spawn.
func (t *Tracer) spanID(id kin.AgentID) (sid trace.SpanID) {
	h := t.derive("span", id)
	copy(sid[:], h[:])
	if !sid.IsValid() {
		sid[0] = 1
	}
	return sid
}

// derive hashes <salt>/<what>/<id>.
func (t *Tracer) derive(what string, id kin.AgentID) [sha256.Size]byte {
	return sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d", t.salt, what, id))
}

// Began is the start of a span Spawn will record: now, or the zero time
// when traces are off (Spawn then ignores it).
func (t *Tracer) Began() time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Now()
}

// Spawn records the span of one spawn, registration or restart
// (kind: spawnKind*) that began at began and ends now: of agent a when it
// was recorded (err may still say its process did not start), else of the
// refusal of the request for name under parent. With traces off it is a
// nil check.
func (t *Tracer) Spawn(ctx context.Context, kind string, parent kin.AgentID, name string, a *kin.Agent, began time.Time, err error) {
	if t == nil {
		return
	}
	if a != nil {
		parent = a.Parent
	} else if parent == 0 {
		parent = caller.Of(ctx).Agent // register's default: the caller's child
	}
	// The span's place is the lineage, not the request: under the parent's
	// span, in its tree's trace. The root is the last of the parent's
	// chain, the agent itself for a root.
	sctx := context.Background()
	root := t.lin.Root(parent)
	var tid trace.TraceID
	if root != 0 {
		tid = t.traceID(root)
		sctx = trace.ContextWithRemoteSpanContext(sctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID:    tid,
			SpanID:     t.spanID(parent),
			TraceFlags: trace.FlagsSampled,
			Remote:     true,
		}))
	}
	attrs := []attribute.KeyValue{
		attribute.String("kin.kind", kind),
		attribute.Int64("kin.parent", int64(parent)),
	}
	if a == nil {
		attrs = append(attrs, attribute.String("kin.agent.name", name))
	} else {
		if root == 0 {
			root, tid = a.ID, t.traceID(a.ID)
		}
		sctx = context.WithValue(sctx, wantIDsKey{}, wantIDs{trace: tid, span: t.spanID(a.ID)})
		attrs = append(attrs,
			attribute.Int64("kin.agent.id", int64(a.ID)),
			attribute.String("kin.agent.name", a.Name),
			attribute.String("kin.agent.role", a.Role),
			attribute.Int("kin.agent.generation", a.Generation),
			attribute.String("kin.agent.responsible", a.Responsible),
			attribute.String("kin.agent.life", string(a.Life)),
			attribute.Int64("kin.root", int64(root)),
		)
		if a.Replaces != 0 {
			attrs = append(attrs, attribute.Int64("kin.agent.replaces", int64(a.Replaces)))
		}
		if a.PID != 0 {
			attrs = append(attrs, attribute.Int("kin.agent.pid", a.PID))
		}
	}
	_, span := t.tr.Start(sctx, "kin."+kind, trace.WithTimestamp(began), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	if err != nil {
		span.SetAttributes(attribute.String("kin.error.code", string(kin.ErrorCodeOf(err))))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// ModelCall records the span of one call through the model gateway
// (issue 25), under the span of the calling agent's spawn, in its tree's
// trace: the model, the tokens, the cost, the upstream's status; never
// the prompt or the completion. With traces off it is a nil check.
func (t *Tracer) ModelCall(c kin.ModelCallData) {
	if t == nil {
		return
	}
	end := time.Now()
	began := end.Add(-time.Duration(c.LatencyMS * float64(time.Millisecond)))
	root := t.lin.Root(c.Agent)
	if root == 0 {
		return
	}
	sctx := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    t.traceID(root),
		SpanID:     t.spanID(c.Agent),
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	}))
	_, span := t.tr.Start(sctx, "kin.model.call", trace.WithTimestamp(began), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.Int64("kin.agent.id", int64(c.Agent)),
		attribute.Int64("kin.root", int64(root)),
		attribute.String("gen_ai.system", c.API),
		attribute.String("gen_ai.request.model", c.Model),
		attribute.String("kin.model.upstream", c.Upstream),
		attribute.String("kin.model.path", c.Path),
		attribute.Bool("kin.model.stream", c.Stream),
		attribute.Int64("gen_ai.usage.input_tokens", c.InputTokens),
		attribute.Int64("gen_ai.usage.output_tokens", c.OutputTokens),
		attribute.Int64("kin.model.cached_tokens", c.CachedTokens),
		attribute.Float64("kin.model.cost", c.Cost),
		attribute.Int("http.response.status_code", c.Status),
	))
	if c.Status/100 != 2 {
		msg := c.Error
		if msg == "" {
			msg = fmt.Sprintf("the upstream answered %d", c.Status)
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End(trace.WithTimestamp(end))
}

// wantIDs are the ids derivedIDs gives the next span started with the
// context that carries them.
type wantIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

type wantIDsKey struct{}

// derivedIDs is the provider's IDGenerator: the ids the context asks for,
// else random ones (a refused spawn's span).
type derivedIDs struct{}

func (derivedIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if w, ok := ctx.Value(wantIDsKey{}).(wantIDs); ok {
		return w.trace, w.span
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		randomBytes(tid[:])
	}
	return tid, randomSpanID()
}

func (derivedIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if w, ok := ctx.Value(wantIDsKey{}).(wantIDs); ok {
		return w.span
	}
	return randomSpanID()
}

func randomSpanID() (sid trace.SpanID) {
	for !sid.IsValid() {
		randomBytes(sid[:])
	}
	return sid
}

func randomBytes(b []byte) {
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
}
