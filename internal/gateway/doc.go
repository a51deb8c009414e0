// Package gateway is kin's model gateway (issue 25): the OpenAI
// (/v1/chat/completions, /v1/responses, /v1/embeddings, /v1/models) and
// Anthropic (/v1/messages, /v1/messages/count_tokens) APIs, served on each
// agent's socket and on the HTTP address, forwarded to the upstreams the
// operator configured with the operator's key, which agents never see.
//
// Each agent gets a credential of its own in its environment (AgentEnv),
// honoured only from that agent (on its socket, the connection's agent
// must be the credential's) and only while it runs. Before a call the
// authority admits it (the subtree's budget, the policy's models lists)
// and the request's output tokens are capped to what the subtree has
// left; after it, the tokens the upstream's answer reports (streamed ones
// included) are priced and added to the agent's and every ancestor's
// spend in one transaction with a model.call event (authority.ModelCall).
//
// It must never decide policy itself (the authority does), record a prompt
// or a completion, or give an upstream's key to anyone but that upstream.
package gateway
