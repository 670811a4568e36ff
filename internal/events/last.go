package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// lastMessage returns the newest message stored on subject (a filter may
// have wildcards). With fromLeader the stream's leader answers
// ($JS.API.STREAM.MSG.GET): it has every acknowledged message. Without it,
// any replica may answer a direct get ($JS.API.DIRECT.GET,
// the only form a reader's permissions allow, because its subject names the
// filter); on a replicated stream a follower answers once it is about 90 %
// caught up, so the newest acknowledged messages may be missing from its
// answer. A journal writer (resume, the fence check) and the purge must not
// read such an answer: a resumed session would lose its newest events and
// its new writer generation could be one a crashed writer already used.
func lastMessage(ctx context.Context, js jetstream.JetStream, stream, subject string, fromLeader bool) (*jetstream.RawStreamMsg, error) {
	if !fromLeader {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return nil, fmt.Errorf("open stream %s: %w", stream, err)
		}
		return s.GetLastMsgForSubject(ctx, subject)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, js.Options().DefaultTimeout)
		defer cancel()
	}
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return nil, err
	}
	reply, err := js.Conn().RequestWithContext(ctx, apiPrefix(js.Options())+"STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, fmt.Errorf("get the last message of %s from the leader of %s: %w", subject, stream, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("get the last message of %s: decode the answer: %w", subject, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound:
		return nil, fmt.Errorf("open stream %s: %w", stream, jetstream.ErrStreamNotFound)
	case resp.Error != nil:
		return nil, fmt.Errorf("get the last message of %s: %w", subject, resp.Error)
	case resp.Message == nil:
		return nil, fmt.Errorf("get the last message of %s: %w", subject, jetstream.ErrInvalidJetStreamResponse)
	}
	m := resp.Message
	var hdr nats.Header
	if len(m.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(m.Header); err != nil {
			return nil, fmt.Errorf("get the last message of %s: headers: %w", subject, err)
		}
	}
	return &jetstream.RawStreamMsg{Subject: m.Subject, Sequence: m.Sequence, Header: hdr, Data: m.Data, Time: m.Time}, nil
}

// apiPrefix is the JetStream API prefix requests go to, with its final dot,
// the way the client library derives it.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}
