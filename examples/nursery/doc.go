// Package nursery is seed 003's nursery as a worked example: a mentor
// creates two children from workspace templates, promotes the newborn
// restricted → supervised → full while its tools change at each stage, and
// the children read each other's workspaces only where both consent. The
// agents are the shell scripts beside this file; run.sh runs them;
// e2e_test.go checks the run. See README.md.
package nursery
