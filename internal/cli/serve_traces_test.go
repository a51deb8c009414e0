package cli

import (
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

// TestServeTraces: --traces and KIN_TRACES reach the config, the flag
// first, and a bad value is refused naming where it came from.
func TestServeTraces(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string { return map[string]string{"KIN_TRACES": v}[k] }
	}
	for _, c := range []struct {
		getenv func(string) string
		flag   string
		want   string
	}{
		{noEnv, "", "off"},
		{env("otlp"), "", "otlp"},
		{env("otlp"), "file:/tmp/spans.jsonl", "file:/tmp/spans.jsonl"},
		{env("file:/x"), "off", "off"},
	} {
		cfg, err := serveConfig(c.getenv, serveFlags{home: "/h", traces: c.flag})
		if err != nil || cfg.Traces != c.want {
			t.Errorf("flag %q: traces %q, %v; want %q", c.flag, cfg.Traces, err, c.want)
		}
	}
	if _, err := serveConfig(noEnv, serveFlags{home: "/h", traces: "jaeger"}); err == nil || !strings.Contains(err.Error(), "--traces") {
		t.Errorf("--traces jaeger: %v", err)
	}
	_, err := serveConfig(env("file:"), serveFlags{home: "/h"})
	if ke, ok := err.(*kin.Error); !ok || ke.Code != kin.ECodeInvalid || !strings.Contains(ke.Message, "KIN_TRACES") {
		t.Errorf("KIN_TRACES=file: %v", err)
	}
}
