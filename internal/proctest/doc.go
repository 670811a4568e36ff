// Package proctest is TEST SUPPORT for tests that run real processes: it
// builds a Go command into a temporary binary and polls the operating system
// (Linux /proc) for a pid to be reaped. Only _test.go files may import this
// package; it imports the standard library only.
package proctest
