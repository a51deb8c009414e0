// Package researchteam is seed 000's research tree as a worked example: seven
// scripted agents that hand work to each other through kin. The agents are
// the shell scripts beside this file; run.sh runs them; e2e_test.go checks
// the run. See README.md.
package researchteam
