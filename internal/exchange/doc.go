// Package exchange is what agents share with consent (seed 003): another
// agent's workspace files read where both sides consented (ReadFile,
// policy.CanRead deciding), and messages between parent and child or along a
// consented edge (Send, Inbox), kept as agent.message events. It answers
// kin.ExchangeService.
//
// It must never write into an agent's workspace or session (the agent
// filesystem's writer appends messages to messages.jsonl), or follow a link
// in what it reads.
package exchange
