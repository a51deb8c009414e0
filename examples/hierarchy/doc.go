// Package hierarchy is seed 002's GO → PO → Specialist → Worker chain as a
// worked example under kin serve --profile profile.json (the shipped
// hierarchy, with Specialists spawning their Workers themselves): a
// Worker's spawn refused, a fourth concurrent child refused, and a crashed Worker replaced
// from its last cursor. The agents are the shell scripts beside this file;
// run.sh runs them; e2e_test.go checks the run. See README.md.
package hierarchy
