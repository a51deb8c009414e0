// Package quota owns the rate limits on what agents make kin write (issue
// 21): a token bucket per agent and kind (messages, reports), with the
// rates read from the profile in force at each call, and a refusal that
// says when to retry. What an agent sends is charged to its own bucket
// and to each ancestor's bucket for its descendants, so the descendants of
// an agent share one quota however many it spawns over time. Streams
// counts the streams each agent holds open (at most MaxStreams).
//
// It must never write anything, read the store, or limit the operator:
// it only says yes or no, before the caller writes.
package quota
