// Package render prints session events for humans (kubectl agent logs).
package render
