package httpapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/kin"
)

// checkInvalid fails unless err is a *kin.Error with code invalid.
func checkInvalid(t *testing.T, err error) {
	t.Helper()
	var ke *kin.Error
	if !errors.As(err, &ke) || ke.Code != kin.ECodeInvalid || ke.Message == "" {
		t.Fatalf("error %#v is not a kin invalid error", err)
	}
}

func FuzzDecodeJSON(f *testing.F) {
	for _, seed := range []string{
		`{"name":"coordinator","responsible":"Dr. Schmidt"}`,
		`{"name":"collector","role":"worker","parent":1,"wallet":"0xabc","constitution_hash":"sha256:00","capability_hash":"sha256:11","scope":"read\nwrite","self_modifying":true,"life":"detached"}`,
		`{"NAME":"case","Parent":2}`,
		`{"name":"a","name":"b"}`,
		`{"name":null,"parent":null}`,
		`null`,
		`{}`,
		``,
		`   `,
		`{"name":"a"} {"name":"b"}`,
		`{"name":"a"}}`,
		`{"name":"a"`,
		`{"name": }`,
		`{"nickname":"a"}`,
		`{"name":5}`,
		`{"parent":"1"}`,
		`{"parent":1.5}`,
		`{"parent":1e3}`,
		`{"parent":-9223372036854775808}`,
		`{"parent":9223372036854775808}`,
		`{"self_modifying":"true"}`,
		`[]`,
		`[{"name":"a"}]`,
		`"name"`,
		`{"name":"\ud800\udc00\ud800"}`,
		"{\"name\":\"\xff\xfe\"}",
		"{\"scope\":\"\x00\"}",
		`{"name":"<script>&amp;"}`,
		"\xef\xbb\xbf{\"name\":\"bom\"}",
		`{"name":"a"}` + strings.Repeat(" ", 100),
		strings.Repeat("[", 10000),
		strings.Repeat(`{"a":`, 100),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req kin.RegisterRequest
		if err := httpapi.DecodeJSON(bytes.NewReader(data), &req); err != nil {
			checkInvalid(t, err)
			return
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("decoded %+v from %q, which does not encode: %v", req, data, err)
		}
		var back kin.RegisterRequest
		if err := httpapi.DecodeJSON(bytes.NewReader(again), &back); err != nil {
			t.Fatalf("decoded %+v from %q; its encoding %s does not decode: %v", req, data, again, err)
		}
		if !reflect.DeepEqual(req, back) {
			t.Fatalf("round trip changed the request:\n input %q\n first %+v\n again %s\n back  %+v", data, req, again, back)
		}
	})
}

var querySeeds = []string{
	"",
	"status=active",
	"status=active&state=registered&role=worker&parent=0&responsible=Dr.+Schmidt&limit=10",
	"parent=7&limit=0",
	"agent=7&since=42&type=agent.registered&type=agent.status&limit=100&follow=true",
	"agent=%237&follow=1",
	"follow=false&since=0",
	"type=",
	"type=a&type=a&type=",
	"status=bogus",
	"status=active&status=revoked",
	"status=",
	"parent=-1",
	"parent=%2B5",
	"parent=0x10",
	"parent=9223372036854775808",
	"limit=-1",
	"limit=99999999999999999999",
	"since=-1",
	"since=9223372036854775807",
	"agent=0",
	"agent=%23",
	"agent=##7",
	"follow=yes",
	"follow",
	"colour=red",
	"=",
	"&&&",
	"%zz=1",
	"a=1;b=2",
	"limit=1&limit=1",
	"role=%00%ff",
	"responsible=" + strings.Repeat("x", 1000),
}

func FuzzParseAgentFilter(f *testing.F) {
	for _, s := range querySeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, _ := url.ParseQuery(s) // what parsed is still used, as net/http does
		got, err := httpapi.ParseAgentFilter(q)
		if err != nil {
			checkInvalid(t, err)
			return
		}
		if got.Limit < 0 || got.Parent < 0 || got.Status != "" && !got.Status.Valid() || got.Parent != 0 && !got.HasParent {
			t.Fatalf("ParseAgentFilter(%q) = %+v", s, got)
		}
		// Encoding the filter as the client does and parsing it again
		// gives the same filter.
		back, err := httpapi.ParseAgentFilter(httpapi.AgentFilterQuery(got))
		if err != nil || back != got {
			t.Fatalf("ParseAgentFilter(%q) = %+v, but its encoding %q parses to %+v, %v", s, got, httpapi.AgentFilterQuery(got).Encode(), back, err)
		}
	})
}

func FuzzParseEventQuery(f *testing.F) {
	for _, s := range append(querySeeds, "before=100&limit=50", "before=-1", "before=5&follow=true", "before=1&before=2") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, _ := url.ParseQuery(s)
		got, follow, err := httpapi.ParseEventQuery(q)
		if err != nil {
			checkInvalid(t, err)
			return
		}
		if got.Agent < 0 || got.Since < 0 || got.Before < 0 || got.Limit < 0 || (follow && got.Before != 0) {
			t.Fatalf("ParseEventQuery(%q) = %+v", s, got)
		}
		back, backFollow, err := httpapi.ParseEventQuery(httpapi.EventQuery(got, follow))
		if err != nil || !reflect.DeepEqual(back, got) || backFollow != follow {
			t.Fatalf("ParseEventQuery(%q) = %+v, %v, but its encoding %q parses to %+v, %v, %v",
				s, got, follow, httpapi.EventQuery(got, follow).Encode(), back, backFollow, err)
		}
	})
}

func FuzzParseLogsQuery(f *testing.F) {
	for _, s := range append(querySeeds, "offset=0", "offset=123&follow=true", "offset=-5", "offset=1&offset=2", "offset=%2B3", "tail=4000", "tail=-1", "offset=5&tail=10") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, _ := url.ParseQuery(s)
		offset, tail, follow, err := httpapi.ParseLogsQuery(q)
		if err != nil {
			checkInvalid(t, err)
			return
		}
		if offset < 0 || tail < 0 {
			t.Fatalf("ParseLogsQuery(%q) = offset %d, tail %d", s, offset, tail)
		}
		again := httpapi.LogsQuery(kin.LogsRequest{Offset: offset, Tail: tail, Follow: follow})
		backOffset, backTail, backFollow, err := httpapi.ParseLogsQuery(again)
		if err != nil || backOffset != offset || backTail != tail || backFollow != follow {
			t.Fatalf("ParseLogsQuery(%q) = %d, %d, %v, but its encoding %q parses to %d, %d, %v, %v", s, offset, tail, follow, again.Encode(), backOffset, backTail, backFollow, err)
		}
	})
}

// TestParseQueriesEdgeCases pins what the fuzzers cannot reach through
// url.ParseQuery: a key with no values (a caller building the map itself),
// and that the same bad query always names the same problem.
func TestParseQueriesEdgeCases(t *testing.T) {
	for _, q := range []map[string][]string{{"type": {}}, {"agent": {}}, {"type": nil}} {
		_, _, err := httpapi.ParseEventQuery(q)
		checkInvalid(t, err)
		_, err = httpapi.ParseAgentFilter(q)
		checkInvalid(t, err)
	}
	for _, q := range []map[string][]string{{"offset": {}}, {"follow": nil}} {
		_, _, _, err := httpapi.ParseLogsQuery(q)
		checkInvalid(t, err)
		_, err = httpapi.ParseInboxQuery(q)
		checkInvalid(t, err)
	}
	for _, q := range []map[string][]string{{"tool": {}}, {"path": nil}, {"tool": {"a", "b"}}} {
		_, _, err := httpapi.ParseExplainQuery(q)
		checkInvalid(t, err)
	}
	// History read backwards cannot be followed.
	q, _ := url.ParseQuery("before=10&follow=true")
	if _, _, err := httpapi.ParseEventQuery(q); err == nil || !strings.Contains(err.Error(), "before") {
		t.Errorf("before with follow: %v, want an error naming before", err)
	} else {
		checkInvalid(t, err)
	}
	q, _ = url.ParseQuery("since=x&limit=y&agent=z&follow=w")
	_, _, first := httpapi.ParseEventQuery(q)
	for range 20 {
		if _, _, err := httpapi.ParseEventQuery(q); err.Error() != first.Error() {
			t.Fatalf("the same query failed with %q, then %q", first, err)
		}
	}
}

func FuzzParseInboxQuery(f *testing.F) {
	for _, s := range append(querySeeds, "agent=5&since=12&follow=true", "since=-1", "agent=0", "follow=1&follow=0", "session=x") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, _ := url.ParseQuery(s)
		req, err := httpapi.ParseInboxQuery(q)
		if err != nil {
			checkInvalid(t, err)
			return
		}
		if req.Agent < 0 || req.Since < 0 {
			t.Fatalf("ParseInboxQuery(%q) = %+v", s, req)
		}
		again := httpapi.InboxQuery(req)
		back, err := httpapi.ParseInboxQuery(again)
		if err != nil || back != req {
			t.Fatalf("ParseInboxQuery(%q) = %+v, but its encoding %q parses to %+v, %v", s, req, again.Encode(), back, err)
		}
	})
}

func FuzzParseExplainQuery(f *testing.F) {
	for _, s := range append(querySeeds, "tool=exec", "path=/work", "tool=exec&path=/work", "tool=", "tool=a&tool=b", "mode=ro") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, _ := url.ParseQuery(s)
		tool, path, err := httpapi.ParseExplainQuery(q)
		if err != nil {
			checkInvalid(t, err)
			return
		}
		if (tool == "") == (path == "") {
			t.Fatalf("ParseExplainQuery(%q) = tool %q, path %q: want exactly one", s, tool, path)
		}
	})
}

func FuzzParseLogQuery(f *testing.F) {
	for _, s := range append(querySeeds, "seq=7", "from=1&limit=100", "from=3&to=9", "seq=-1", "seq=1&seq=2", "limit=99999999999", "to=x", "seq=07") {
		f.Add(s)
	}
	known, required := []string{"from", "to", "limit"}, []string{"from"}
	f.Fuzz(func(t *testing.T, s string) {
		q, _ := url.ParseQuery(s)
		lq, err := httpapi.ParseLogQuery(q, known, required)
		if err != nil {
			checkInvalid(t, err)
			return
		}
		if lq.Seq != 0 || lq.From < 0 || lq.To < 0 || lq.Limit < 0 {
			t.Fatalf("ParseLogQuery(%q) = %+v", s, lq)
		}
		if _, ok := q["from"]; !ok {
			t.Fatalf("ParseLogQuery(%q) accepted a query without its required from", s)
		}
		again := url.Values{"from": {strconv.FormatInt(lq.From, 10)}}
		if lq.To != 0 {
			again.Set("to", strconv.FormatInt(lq.To, 10))
		}
		if lq.Limit != 0 {
			again.Set("limit", strconv.Itoa(lq.Limit))
		}
		back, err := httpapi.ParseLogQuery(again, known, required)
		if err != nil || back != lq {
			t.Fatalf("ParseLogQuery(%q) = %+v, but its encoding %q parses to %+v, %v", s, lq, again.Encode(), back, err)
		}
	})
}
