package fakemodel

import (
	"encoding/json"
	"net/http"
)

// messagesRequest is the part of a Messages API request the server reads.
type messagesRequest struct {
	Model     string          `json:"model"`
	Stream    bool            `json:"stream"`
	MaxTokens *int            `json:"max_tokens"`
	Messages  json.RawMessage `json:"messages"`
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request, body []byte) {
	var req messagesRequest
	if !decode(w, anthropic, body, &req) {
		return
	}
	// max_tokens and messages are required, as Anthropic requires them.
	if req.MaxTokens == nil {
		writeError(w, anthropic, http.StatusBadRequest, "invalid_request_error", "max_tokens: Field required")
		return
	}
	if *req.MaxTokens < 1 {
		writeError(w, anthropic, http.StatusBadRequest, "invalid_request_error", "max_tokens: Input should be greater than or equal to 1")
		return
	}
	if len(req.Messages) == 0 || string(req.Messages) == "null" {
		writeError(w, anthropic, http.StatusBadRequest, "invalid_request_error", "messages: Field required")
		return
	}
	if !s.modelAllowed(w, anthropic, req.Model) {
		return
	}
	out, reply, capped := s.output(*req.MaxTokens)
	stop := "end_turn"
	if capped {
		stop = "max_tokens"
	}
	id := "msg_" + randomID()
	usage := func(output int) map[string]any {
		return map[string]any{
			"input_tokens":                s.opts.InputTokens,
			"cache_creation_input_tokens": s.opts.CacheCreationTokens,
			"cache_read_input_tokens":     s.opts.CachedTokens,
			"output_tokens":               output,
			"service_tier":                "standard",
		}
	}
	message := func(content []any, stopReason any, u map[string]any) map[string]any {
		return map[string]any{
			"id":            id,
			"type":          "message",
			"role":          "assistant",
			"model":         req.Model,
			"content":       content,
			"stop_reason":   stopReason,
			"stop_sequence": nil,
			"usage":         u,
		}
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, message([]any{map[string]any{"type": "text", "text": reply}}, stop, usage(out)))
		return
	}
	st := s.startStream(w, r)
	// message_start carries the input and a first output count (1, as
	// Anthropic's does); message_delta's output_tokens is the total.
	first := min(1, out)
	send := func(typ string, fields map[string]any) bool {
		fields["type"] = typ
		return st.event(typ, fields) == nil
	}
	if !send("message_start", map[string]any{"message": message([]any{}, nil, usage(first))}) ||
		!send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) ||
		!send("ping", map[string]any{}) {
		return
	}
	for _, c := range s.chunks(reply) {
		if !st.wait() || st.raw("content_block_delta", textDelta(c)) != nil {
			return
		}
	}
	if !send("content_block_stop", map[string]any{"index": 0}) ||
		!send("message_delta", map[string]any{
			"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": out},
		}) {
		return
	}
	send("message_stop", map[string]any{})
}

// textDelta is a content_block_delta event's data for text c: the bytes
// encoding/json gives the map {"index": 0, "delta": {"type": "text_delta",
// "text": c}, "type": "content_block_delta"} (keys sorted), made without
// encoding a map per chunk, the fake's largest cost per event after the
// write itself (the gateway benchmark's streams).
func textDelta(c string) []byte {
	text, _ := json.Marshal(c) // a string always encodes
	b := make([]byte, 0, len(text)+80)
	b = append(b, `{"delta":{"text":`...)
	b = append(b, text...)
	return append(b, `,"type":"text_delta"},"index":0,"type":"content_block_delta"}`...)
}

func (s *Server) countTokens(w http.ResponseWriter, _ *http.Request, body []byte) {
	var req messagesRequest
	if !decode(w, anthropic, body, &req) {
		return
	}
	if len(req.Messages) == 0 || string(req.Messages) == "null" {
		writeError(w, anthropic, http.StatusBadRequest, "invalid_request_error", "messages: Field required")
		return
	}
	if !s.modelAllowed(w, anthropic, req.Model) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": s.opts.InputTokens})
}
