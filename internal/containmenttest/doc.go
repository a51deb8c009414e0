// Package containmenttest holds the end-to-end tests of issue 18's
// promise: kin serve run by an ordinary user (one the test creates)
// contains its agents as a root daemon does, in a delegated cgroup and, where
// no cgroup is writable, in PID namespaces. It has no code but its tests.
package containmenttest
