package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestEventReaderReadsProvidersEventsItself: the events that carry usage
// or end a stream, as the providers send them, are read without
// encoding/json (the reader's fast path), to the same counts.
func TestEventReaderReadsProvidersEventsItself(t *testing.T) {
	for _, c := range []struct {
		data string
		want string
	}{
		{`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":7,"output_tokens":1,"service_tier":"standard"}}}`,
			"message_start usage=<nil> message=in=25,out=1,read=7,creation=0 response=<nil> choices=<nil>"},
		{`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`,
			"message_delta usage=out=15 message=<nil> response=<nil> choices=<nil>"},
		{`{"type":"message_stop"}`, "message_stop usage=<nil> message=<nil> response=<nil> choices=<nil>"},
		{`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`,
			" usage=prompt=10,completion=5,prompt_cached=4 message=<nil> response=<nil> choices=[]"},
		{`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"\"usage\":{\"prompt_tokens\":99}"}}],"usage":null}`,
			` usage=<nil> message=<nil> response=<nil> choices=[{"index":0,"delta":{"content":"\"usage\":{\"prompt_tokens\":99}"}}]`},
		{`{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","status":"completed","usage":{"input_tokens":3,"input_tokens_details":{"cached_tokens":1},"output_tokens":2,"total_tokens":5}}}`,
			"response.completed usage=<nil> message=<nil> response=in=3,out=2,input_cached=1 choices=<nil>"},
	} {
		var r eventReader
		e, ok := r.scan([]byte(c.data))
		if !ok {
			t.Errorf("left to encoding/json: %s", c.data)
			continue
		}
		if got := describeEvent(e); got != c.want {
			t.Errorf("%s\n read as %s\n want    %s", c.data, got, c.want)
		}
	}
}

// TestEventReaderLeavesTheUnusualToJSON: what json.Unmarshal could read
// otherwise than the reader would, the reader leaves to it.
func TestEventReaderLeavesTheUnusualToJSON(t *testing.T) {
	for _, data := range []string{
		`{"Usage":{"prompt_tokens":1}}`,                             // json matches names in any case
		`{"usag\u0065":{"prompt_tokens":1}}`,                        // or escaped
		`{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}`, // the last of two wins there
		`{"usage":{"prompt_tokens":1.0}}`,                           // not a whole number: json fails
		`{"usage":{"prompt_tokens":"1"}}`,
		`{"usage":{"prompt_tokens":99999999999999999999}}`,
		`{"usage":[]}`,
		`{"type":"message_st\u006fp"}`,
		`{"usage":{"prompt_tokens":1}} x`,
		`{"usage":{"prompt_tokens":1}`,
		`{"a":"` + "\x01" + `"}`,
		`[1]`,
		`null`,
		`{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	} {
		var r eventReader
		if e, ok := r.scan([]byte(data)); ok {
			t.Errorf("%s read as %s, not left to encoding/json", data, describeEvent(e))
		}
	}
}

// FuzzEventReaderAgreesWithJSON: whatever the reader reads itself,
// json.Unmarshal reads the same from it.
func FuzzEventReaderAgreesWithJSON(f *testing.F) {
	for _, s := range []string{
		`{"type":"message_start","message":{"usage":{"input_tokens":25,"cache_read_input_tokens":7,"output_tokens":1}}}`,
		`{"type":"message_delta","usage":{"output_tokens":15}}`,
		`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}`,
		`{"choices":[{"delta":{"content":"x"}}],"usage":null}`,
		`{"type":"response.completed","response":{"usage":{"input_tokens":3,"input_tokens_details":{"cached_tokens":1},"output_tokens":2}}}`,
		`{"type":null,"message":null,"response":{},"usage":{"prompt_tokens":-0,"prompt_tokens_details":null}}`,
		` { "a" : [ 1 , -2.5e+3 , true , false , null , { } , [ ] , "\u00e9\n" ] } `,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		var r eventReader
		e, ok := r.scan([]byte(data))
		if !ok {
			return
		}
		var want streamEvent
		if err := json.Unmarshal([]byte(data), &want); err != nil {
			t.Fatalf("%q read as %s; json: %v", data, describeEvent(e), err)
		}
		want.Type = eventType([]byte(want.Type))
		if got, w := describeEvent(e), describeEvent(&want); got != w {
			t.Fatalf("%q\n read as %s\n json    %s", data, got, w)
		}
	})
}

// describeEvent says what onEvent reads of e.
func describeEvent(e *streamEvent) string {
	holder := func(h *usageHolder) string {
		if h == nil {
			return "<nil>"
		}
		return describeUsage(h.Usage)
	}
	choices := "<nil>"
	if e.Choices != nil {
		choices = string(*e.Choices)
	}
	return fmt.Sprintf("%s usage=%s message=%s response=%s choices=%s", e.Type, describeUsage(e.Usage), holder(e.Message), holder(e.Response), choices)
}

func describeUsage(u *rawUsage) string {
	if u == nil {
		return "<nil>"
	}
	var parts []string
	add := func(name string, p *int64) {
		if p != nil {
			parts = append(parts, fmt.Sprintf("%s=%d", name, *p))
		}
	}
	add("prompt", u.PromptTokens)
	add("completion", u.CompletionTokens)
	add("in", u.InputTokens)
	add("out", u.OutputTokens)
	add("read", u.CacheRead)
	add("creation", u.CacheCreation)
	if u.PromptDetails != nil {
		add("prompt_cached", u.PromptDetails.CachedTokens)
		if u.PromptDetails.CachedTokens == nil {
			parts = append(parts, "prompt_details")
		}
	}
	if u.InputDetails != nil {
		add("input_cached", u.InputDetails.CachedTokens)
		if u.InputDetails.CachedTokens == nil {
			parts = append(parts, "input_details")
		}
	}
	return strings.Join(parts, ",")
}

// TestMayMatterPerAPI: the events onEvent acts on pass the filter for
// their API; content deltas do not.
func TestMayMatterPerAPI(t *testing.T) {
	for _, c := range []struct {
		api  API
		data string
		want bool
	}{
		{Anthropic, `{"type":"message_start","message":{"usage":{"input_tokens":1}}}`, true},
		{Anthropic, `{"type":"message_stop"}`, true},
		{Anthropic, `{"type":"message_delta","usage" : {"output_tokens":2}}`, true},
		{Anthropic, `{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}`, false},
		{Anthropic, `{"type":"ping"}`, false},
		{OpenAI, `{"choices":[],"usage":{"prompt_tokens":1}}`, true},
		{OpenAI, `{"choices":[{"delta":{"content":"x"}}],"usage":null}`, false},
		{OpenAI, `{"type":"response.completed","response":{"status":"completed"}}`, true},
		{OpenAI, `{"type":"response.incomplete"}`, true},
		{OpenAI, `{"type":"response.failed"}`, true},
		{OpenAI, `{"type":"response.output_text.delta","delta":"x"}`, false},
	} {
		if got := mayMatter(c.api, []byte(c.data)); got != c.want {
			t.Errorf("%s %s: %v, want %v", c.api, c.data, got, c.want)
		}
	}
}
