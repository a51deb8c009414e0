package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
)

// stream passes a server-sent event stream on as it comes, one event at a
// time, flushed before kin waits for more (after each event the upstream
// sent alone, after the last of a burst), reading the usage on the way:
// OpenAI chat's last chunk (which the gateway asked for with
// stream_options.include_usage, and drops when the client did not ask
// for it), OpenAI responses' response.completed, Anthropic's
// message_start and message_delta. The call is metered before the event
// that ends the stream goes out ([DONE], response.completed,
// message_stop), so that the agent's next call sees its spend.
func (g *Gateway) stream(w http.ResponseWriter, r *http.Request, ep endpoint, resp *http.Response, c *call) {
	copyResponseHeaders(w, resp)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	rc.Flush()
	src := &endSeen{r: resp.Body}
	rd := streamReaders.Get().(*bufio.Reader)
	rd.Reset(src)
	defer func() {
		rd.Reset(nil) // holds no body while pooled
		streamReaders.Put(rd)
	}()
	var u usage
	var er eventReader // the events' reader, its storage reused event after event
	// ev: the event's raw lines, as they go on, read into it (its room
	// reused event after event). Its data is the value of its one data
	// line, ev[dataFrom:dataTo], or the values of several joined in data.
	var ev, data []byte
	dataFrom, dataTo, dataLines := 0, 0, 0
	var readErr error
	// pending: events written and not flushed. They are flushed before
	// any read that may wait for the upstream (no whole line buffered,
	// and the upstream's body not yet ended) and before the call is
	// metered (a commit): an event never waits for the next nor for the
	// metering, and a burst of events the upstream sent together goes
	// out in one write (an event that only carries usage, as
	// message_delta, is no reason to flush). What is pending when the
	// upstream's body has ended goes out as the handler returns, in the
	// write that ends the response (its last chunk): nothing is waited
	// for in between.
	pending := false
	c.beforeMeter = func() {
		if pending {
			rc.Flush()
			pending = false
		}
	}
	defer func() { c.beforeMeter = nil }()
	for {
		if pending && !src.ended && !lineBuffered(rd) {
			rc.Flush()
			pending = false
		}
		start := len(ev)
		var err error
		ev, err = readLine(rd, maxEventBytes, ev)
		line := ev[start:]
		if field, from, to := sseField(line); string(field) == "data" {
			from, to = start+from, start+to
			switch dataLines {
			case 0:
				dataFrom, dataTo = from, to
			case 1:
				data = append(data[:0], ev[dataFrom:dataTo]...)
				fallthrough
			default:
				if len(data) > 0 {
					data = append(data, '\n')
				}
				data = append(data, ev[from:to]...)
			}
			dataLines++
		}
		end := len(line) > 0 && len(trimEOL(line)) == 0
		if (end || err != nil) && len(ev) > 0 {
			d := data
			if dataLines <= 1 {
				d = ev[dataFrom:dataTo]
			}
			if g.onEvent(r, ep, c, &u, &er, d) {
				if _, werr := w.Write(ev); werr == nil {
					pending = true
				}
			}
			ev, data = ev[:0], data[:0]
			dataFrom, dataTo, dataLines = 0, 0, 0
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
	}
	if readErr != nil && c.data.Error == "" {
		c.data.Error = "the upstream's stream broke off: " + readErr.Error()
	}
	g.meter(r.Context(), c, u)
}

// endSeen reads r and notes when r has ended (an error or io.EOF, which
// net/http's body returns with the last bytes when the last chunk came
// with them): reading on will not wait for the upstream.
type endSeen struct {
	r     io.Reader
	ended bool
}

func (e *endSeen) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.ended = true
	}
	return n, err
}

// streamReaders are the stream readers, reused: each is 64 KiB, which
// allocated per stream was a quarter of the bytes the process allocated
// in BenchmarkGateway (and a large object, cleared on allocation).
var streamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// trimJSONSpace is b without the JSON white space it starts with.
func trimJSONSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	return b
}

// doneData is the data of the event that ends an OpenAI stream.
var doneData = []byte("[DONE]")

// lineBuffered says whether a whole line waits in rd: reading it will not
// wait for the upstream.
func lineBuffered(rd *bufio.Reader) bool {
	b, _ := rd.Peek(rd.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// readLine reads one line (with its end) onto out, which may then hold
// at most limit bytes (else out as it was, and an error).
func readLine(rd *bufio.Reader, limit int, out []byte) ([]byte, error) {
	n0 := len(out)
	for {
		chunk, err := rd.ReadSlice('\n')
		out = append(out, chunk...)
		if len(out) > limit {
			return out[:n0], errors.New("an event is larger than the gateway reads")
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return out, err
	}
}

// trimEOL is line without its end (any \r and \n it ends with).
func trimEOL(line []byte) []byte {
	for len(line) > 0 && (line[len(line)-1] == '\n' || line[len(line)-1] == '\r') {
		line = line[:len(line)-1]
	}
	return line
}

// sseField splits an event-stream line into its field and where in line
// its value is (from one space after the colon, to the line's end).
func sseField(line []byte) (field []byte, from, to int) {
	line = trimEOL(line)
	i := bytes.IndexByte(line, ':')
	if i < 0 {
		return line, len(line), len(line)
	}
	from = i + 1
	if from < len(line) && line[from] == ' ' {
		from++
	}
	return line[:i], from, len(line)
}

// onEvent reads one event's data for usage, meters the call before the
// event that ends the stream, and says whether to pass the event on.
func (g *Gateway) onEvent(r *http.Request, ep endpoint, c *call, u *usage, er *eventReader, data []byte) bool {
	if len(data) == 0 {
		return true
	}
	if ep.api == OpenAI && bytes.Equal(data, doneData) {
		g.meter(r.Context(), c, *u)
		return true
	}
	// Most events are content deltas with nothing to meter: only those
	// that can carry usage or end the stream are decoded.
	if !mayMatter(ep.api, data) {
		return true
	}
	e, ok := er.read(data)
	if !ok {
		return true
	}
	switch ep.api {
	case OpenAI:
		if e.Response != nil && e.Response.Usage != nil {
			u.merge(e.Response.Usage, OpenAI)
		}
		if e.Usage != nil {
			u.merge(e.Usage, OpenAI)
			if ep == epChat {
				g.meter(r.Context(), c, *u)
				// The usage chunk has no choices; one the client did not
				// ask for is kin's alone.
				if !c.wantUsag && (e.Choices == nil || string(*e.Choices) == "[]") {
					return false
				}
			}
		}
		switch e.Type {
		case "response.completed", "response.incomplete", "response.failed":
			g.meter(r.Context(), c, *u)
		}
	case Anthropic:
		switch e.Type {
		case "message_start":
			if e.Message != nil {
				u.merge(e.Message.Usage, Anthropic)
			}
		case "message_delta":
			u.merge(e.Usage, Anthropic)
		case "message_stop":
			g.meter(r.Context(), c, *u)
		}
	}
	return true
}

// mayMatter says whether an event's data can hold usage or end a stream
// of api: a usage object (not null), or one of the types the gateway acts
// on for api (a superset: "message_st" is message_start's and
// message_stop's).
func mayMatter(api API, data []byte) bool {
	// `usage"` rather than `"usage"`: a quote starts most of the data's
	// tokens, and bytes.Index looks for a pattern's first byte first.
	for rest := data; ; {
		i := bytes.Index(rest, []byte(`usage"`))
		if i < 0 {
			break
		}
		quoted := i > 0 && rest[i-1] == '"'
		rest = rest[i+len(`usage"`):]
		if !quoted {
			continue
		}
		v, ok := bytes.CutPrefix(trimJSONSpace(rest), []byte(":"))
		if v = trimJSONSpace(v); ok && len(v) > 0 && v[0] == '{' {
			return true
		}
	}
	if api == Anthropic {
		return bytes.Contains(data, []byte("message_st"))
	}
	for _, t := range [][]byte{[]byte("response.completed"), []byte("response.incomplete"), []byte("response.failed")} {
		if bytes.Contains(data, t) {
			return true
		}
	}
	return false
}
