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
	var er eventReader  // the events' reader, its storage reused event after event
	var ev bytes.Buffer // the event's raw lines, as they go on
	var data bytes.Buffer
	var readErr error
	var buf []byte // readLine's, reused line after line
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
		line, err := readLine(rd, maxEventBytes-ev.Len(), buf[:0])
		buf = line
		if len(line) > 0 {
			ev.Write(line)
			if field, value := sseField(line); string(field) == "data" {
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.Write(value)
			}
		}
		end := len(bytes.TrimRight(line, "\r\n")) == 0 && len(line) > 0
		if (end || err != nil) && ev.Len() > 0 {
			forward := g.onEvent(r, ep, c, &u, &er, data.Bytes())
			if forward {
				if _, werr := w.Write(ev.Bytes()); werr == nil {
					pending = true
				}
			}
			ev.Reset()
			data.Reset()
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

// doneData is the data of the event that ends an OpenAI stream.
var doneData = []byte("[DONE]")

// lineBuffered says whether a whole line waits in rd: reading it will not
// wait for the upstream.
func lineBuffered(rd *bufio.Reader) bool {
	b, _ := rd.Peek(rd.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// readLine reads one line (with its end) of at most limit bytes, into
// out's room.
func readLine(rd *bufio.Reader, limit int, out []byte) ([]byte, error) {
	for {
		chunk, err := rd.ReadSlice('\n')
		out = append(out, chunk...)
		if len(out) > limit {
			return nil, errors.New("an event is larger than the gateway reads")
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return out, err
	}
}

// sseField splits an event-stream line into its field and value.
func sseField(line []byte) ([]byte, []byte) {
	line = bytes.TrimRight(line, "\r\n")
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return line, nil
	}
	value, _ = bytes.CutPrefix(value, []byte(" "))
	return name, value
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
	for rest := data; ; {
		i := bytes.Index(rest, []byte(`"usage"`))
		if i < 0 {
			break
		}
		rest = bytes.TrimLeft(rest[i+len(`"usage"`):], " \t\r\n")
		if rest, ok := bytes.CutPrefix(rest, []byte(":")); ok {
			if bytes.HasPrefix(bytes.TrimLeft(rest, " \t\r\n"), []byte("{")) {
				return true
			}
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
