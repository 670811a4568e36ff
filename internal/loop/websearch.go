package loop

import (
	"errors"
	"slices"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// WithWebSearch offers the provider's own server-side web search on every
// model request of the session and of its in-process subagents (nil: off).
// The provider runs the searches itself; they come back as PartWebSearch
// parts and text citations of the assistant message, and reach
// ASSISTANT_TEXT_END as WebSearches and Citations. An adapter that cannot
// search, or not with these options, fails the request with an
// invalid-request error.
func WithWebSearch(ws *llm.WebSearch) Option {
	return func(o *options) error {
		if ws == nil {
			o.webSearch = nil
			return nil
		}
		if ws.MaxUses < 0 {
			return errors.New("web search: negative max uses")
		}
		c := *ws
		c.AllowedDomains = slices.Clone(ws.AllowedDomains)
		c.BlockedDomains = slices.Clone(ws.BlockedDomains)
		o.webSearch = &c
		return nil
	}
}

// webSearchRequest is a copy of the session's web search options for one
// request (nil when off).
func (s *Session) webSearchRequest() *llm.WebSearch {
	if s.webSearch == nil {
		return nil
	}
	c := *s.webSearch
	c.AllowedDomains = slices.Clone(s.webSearch.AllowedDomains)
	c.BlockedDomains = slices.Clone(s.webSearch.BlockedDomains)
	return &c
}
