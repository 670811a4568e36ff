package runner

import (
	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// deliveredInJournal returns the names of messages whose text the journal
// holds as an input after the prompt, matched in order: what was delivered,
// whatever status recorded (the manager may have stopped between the two).
func deliveredInJournal(msgs []agentsv1.Message, events []loop.Event) []string {
	var inputs []string
	seenPrompt := false
	for _, ev := range events {
		switch ev.Kind {
		case loop.EventUserInput:
			if !seenPrompt {
				seenPrompt = true
				continue
			}
			inputs = append(inputs, ev.Data.Content)
		case loop.EventSteeringInjected:
			inputs = append(inputs, ev.Data.Content)
		}
	}
	var out []string
	i := 0
	for _, m := range msgs {
		for i < len(inputs) && inputs[i] != m.Text {
			i++
		}
		if i == len(inputs) {
			break
		}
		out = append(out, m.Name)
		i++
	}
	return out
}

// promptSubmitted reports whether the journal holds the first input.
func promptSubmitted(events []loop.Event) bool {
	for _, ev := range events {
		if ev.Kind == loop.EventUserInput {
			return true
		}
	}
	return false
}
