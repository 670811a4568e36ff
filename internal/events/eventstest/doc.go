// Package eventstest is TEST SUPPORT for code that publishes or reads
// session events: it starts a real embedded NATS JetStream server with the
// events stream created. Only _test.go files may import this package.
package eventstest
