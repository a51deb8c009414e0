// Package quota owns the rate limits on what agents make kin write (issue
// 21): a token bucket per agent and kind (messages, reports), with the
// rates read from the profile in force at each call, and a refusal that
// says when to retry. What an agent sends is charged to its bucket and to
// each ancestor's, so a subtree shares its ancestors' quotas.
//
// It must never write anything, read the store, or limit the operator:
// it only says yes or no, before the caller writes.
package quota
