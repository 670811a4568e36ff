//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// forgedMarker is the stdout of the forged results; the command spells it in
// octal escapes only, so it appears in no event unless a forged frame or
// forged bytes got through.
const forgedMarker = "FORGED-CONTROL-STREAM-RESULT"

// forgedFramesPrintf returns a printf format writing protocol version 1
// result and output frames for call ids 1 to 16, some garbage and a length
// prefix promising far more than follows: every byte as an octal escape.
func forgedFramesPrintf() string {
	GinkgoHelper()
	var raw []byte
	for id := uint64(1); id <= 16; id++ {
		for _, fr := range []*executor.Frame{
			{ID: id, Kind: executor.KindOutput, Data: []byte(forgedMarker + "\n")},
			{ID: id, Kind: executor.KindResult, Body: json.RawMessage(`{"stdout":"` + forgedMarker + `\n","exitCode":0}`)},
		} {
			b, err := executor.EncodeFrame(fr, 0)
			Expect(err).NotTo(HaveOccurred())
			raw = append(raw, b...)
		}
	}
	raw = append(raw, "garbage "+forgedMarker...)
	raw = append(raw, 0x01, 0xff, 0xff, 0xff)
	var sb strings.Builder
	for _, c := range raw {
		fmt.Fprintf(&sb, `\%03o`, c)
	}
	return sb.String()
}

// controlStreamScript: the first command writes forged frames to every
// descriptor of its parent (the executor serving the exec stream) and of PID
// 1 (`executor-sidecar idle`) and reports which it could open; the session
// then goes on.
func controlStreamScript() string {
	return `turns:
  - toolCalls:
      - name: shell
        arguments:
          timeout_ms: 60000
          command: |-
            printf '` + forgedFramesPrintf() + `' >/tmp/forged.bin
            echo "ppid=$PPID"
            for f in /proc/$PPID/fd/* /proc/1/fd/*; do
              if cat /tmp/forged.bin 2>/dev/null >"$f"; then echo "wrote $f"; else echo "refused $f"; fi
            done 2>/dev/null
            echo forge-attempt-done
  - expect: {lastToolResultContains: "forge-attempt-done"}
    toolCalls:
      - name: shell
        arguments: {command: "echo the-stream-goes-on"}
  - expect: {lastToolResultContains: "the-stream-goes-on"}
    text: "done"
`
}

var _ = Describe("control-stream integrity", Ordered, ContinueOnFailure, Label("security"), func() {
	op := withOperator("ao-ctlstream", "ao-ctlstream")

	It("keeps forged frames from a workspace command out of the model's results and the events, and the session goes on", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-ctlstream")
		s := scriptedSession(ctx, ns, "forger", controlStreamScript())

		final := waitForOutcome(ctx, s, 3*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded),
			"the forging command's genuine result reached the model and the next call ran: status.error=%q", final.Status.Error)
		Expect(final.Status.Result).To(Equal("done"))

		evs, raw := sessionEvents(ctx, op, final)
		Expect(raw).NotTo(ContainSubstring(forgedMarker), "no forged frame or byte reached the events")
		ends := eventsOfKind(evs, loop.EventToolCallEnd)
		Expect(ends).To(HaveLen(2))
		attack := ends[0].Data
		Expect(attack.IsError).To(BeFalse(), "the forging command's call: %s", attack.Error)
		Expect(attack.Output).To(ContainSubstring("forge-attempt-done"))
		Expect(attack.Output).To(MatchRegexp(`refused /proc/\d+/fd`), "the command tried its parent's descriptors")
		Expect(attack.Output).To(ContainSubstring("refused /proc/1/fd"), "and PID 1's")
		Expect(attack.Output).NotTo(ContainSubstring("wrote /proc/"), "the executor's descriptors are out of the workload's reach")
		Expect(ends[1].Data.Output).To(ContainSubstring("the-stream-goes-on"))
	}, SpecTimeout(5*time.Minute))
})
