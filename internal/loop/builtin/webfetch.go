package builtin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// web_fetch defaults and caps.
const (
	// DefaultWebFetchMaxCalls is web_fetch's per-session call cap (seed 004:
	// about 25).
	DefaultWebFetchMaxCalls = 25
	// DefaultWebFetchTimeout bounds one fetch, redirects and body included.
	DefaultWebFetchTimeout = 30 * time.Second
	// DefaultWebFetchMaxBytes bounds the body read of one fetch.
	DefaultWebFetchMaxBytes = 2 << 20
	// DefaultWebFetchChars is how much text one call returns by default,
	// below the default output limit so the text is not cut in its middle.
	DefaultWebFetchChars = 25_000
	// MaxWebFetchChars caps max_chars.
	MaxWebFetchChars = 100_000
	// webFetchGrace is how much longer than the fetch's own timeout the
	// call waits for the environment's answer.
	webFetchGrace = 5 * time.Second
)

// WebFetchOptions configures the web_fetch tool.
type WebFetchOptions struct {
	// MaxCalls caps the calls of one tool instance, i.e. of one session
	// (0: DefaultWebFetchMaxCalls).
	MaxCalls int
	// Timeout bounds each fetch (0: DefaultWebFetchTimeout).
	Timeout time.Duration
	// MaxBytes bounds each response body (0: DefaultWebFetchMaxBytes).
	MaxBytes int64
	// AllowPrivate permits private, loopback and link-local addresses.
	AllowPrivate bool
	// AllowHosts permits those addresses for the listed hosts, addresses
	// and CIDRs (tool.FetchRequest.AllowHosts).
	AllowHosts []string
}

// WebFetch returns the web_fetch tool: it fetches a URL through the
// environment's tool.Fetcher (from the workspace, so its network rules
// apply) and returns the page as Markdown-like text. Each returned tool
// counts its own calls: create one per session. Environments without a
// Fetcher get an error result saying web_fetch is unavailable.
func WebFetch(opts WebFetchOptions) tool.Registered {
	if opts.MaxCalls <= 0 {
		opts.MaxCalls = DefaultWebFetchMaxCalls
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultWebFetchTimeout
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultWebFetchMaxBytes
	}
	desc := "Fetches a web page or text document by URL (http or https) and returns its content as Markdown-like text " +
		"(HTML is converted; scripts and styles are dropped; images, PDFs and other binary content are refused). " +
		"Use it to read documentation, issues or API references the task needs. The fetch runs from the workspace, " +
		"so only hosts the workspace may reach are available, and private network addresses are refused unless the session allows them. " +
		fmt.Sprintf("Each session may make at most %d web_fetch calls; each fetch is limited to %s and %d bytes. ", opts.MaxCalls, opts.Timeout, opts.MaxBytes) +
		"Long pages are returned in parts: call again with start_index to read on."
	schema := objectSchema([]string{"url"},
		p("url", "string", "The absolute http or https URL to fetch."),
		namedProp{"max_chars", prop{Type: "integer", Minimum: intMin(1),
			Description: fmt.Sprintf("Maximum characters of text to return (default %d, at most %d).", DefaultWebFetchChars, MaxWebFetchChars)}},
		namedProp{"start_index", prop{Type: "integer", Minimum: intMin(0),
			Description: "Character offset into the page's text to start from, to read on after a part (default 0)."}},
	)
	w := &webFetch{opts: opts}
	return tool.Registered{
		Definition: tool.Definition{Name: "web_fetch", Description: desc, Parameters: schema},
		Executor:   w.run,
	}
}

type webFetch struct {
	opts  WebFetchOptions
	calls atomic.Int64
}

type webFetchArgs struct {
	URL        string  `json:"url"`
	MaxChars   flexInt `json:"max_chars"`
	StartIndex flexInt `json:"start_index"`
}

func (w *webFetch) run(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
	var a webFetchArgs
	if msg, ok := decode(inv, &a); !ok {
		return errorResult("%s", msg)
	}
	u := strings.TrimSpace(a.URL)
	if u == "" {
		return errorResult("Error: the \"url\" parameter is required and must not be empty.")
	}
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return errorResult("Error: %q is not an http or https URL; web_fetch fetches absolute http(s) URLs only (use read_file for workspace files).", u)
	}
	maxChars := DefaultWebFetchChars
	if a.MaxChars.set {
		if a.MaxChars.v < 1 {
			return errorResult("Error: max_chars must be at least 1, got %d.", a.MaxChars.v)
		}
		maxChars = min(a.MaxChars.v, MaxWebFetchChars)
	}
	start := 0
	if a.StartIndex.set {
		if a.StartIndex.v < 0 {
			return errorResult("Error: start_index must not be negative, got %d.", a.StartIndex.v)
		}
		start = a.StartIndex.v
	}
	if n := w.calls.Add(1); n > int64(w.opts.MaxCalls) {
		return errorResult("Error: web_fetch call limit reached: this session may make at most %d web_fetch calls. "+
			"Continue with what you have fetched, or ask the user for the information.", w.opts.MaxCalls)
	}

	fctx, cancel := context.WithTimeout(ctx, w.opts.Timeout+webFetchGrace)
	defer cancel()
	res, err := tool.Fetch(fctx, inv.Env, tool.FetchRequest{
		URL: u, MaxBytes: w.opts.MaxBytes, Timeout: w.opts.Timeout,
		AllowPrivate: w.opts.AllowPrivate, AllowHosts: w.opts.AllowHosts,
	})
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return tool.Result{}, cerr
		}
		switch {
		case errors.Is(err, tool.ErrFetchUnsupported):
			return errorResult("Error: web_fetch is not available in this environment: %v", err)
		case errors.Is(err, context.DeadlineExceeded) || fctx.Err() != nil:
			return errorResult("Error: fetching %s timed out (limit %s): %v. Try a smaller or faster page.", u, w.opts.Timeout, err)
		}
		return errorResult("Error: cannot fetch %s: %v", u, err)
	}
	return webFetchResult(res, start, maxChars, w.opts.MaxBytes), nil
}

// webFetchResult renders a fetched page: a header, then the text from
// start, at most maxChars characters of it.
func webFetchResult(res *tool.FetchResult, start, maxChars int, maxBytes int64) tool.Result {
	var b strings.Builder
	fmt.Fprintf(&b, "URL: %s\nStatus: %d %s\n", res.URL, res.Status, http.StatusText(res.Status))
	if res.ContentType != "" {
		fmt.Fprintf(&b, "Content-Type: %s\n", res.ContentType)
	}
	if res.Truncated {
		fmt.Fprintf(&b, "[The document is larger than %d bytes; only its first %d bytes were read.]\n", maxBytes, res.Bytes)
	}
	text := res.Text
	total := utf8.RuneCountInString(text)
	if start >= total && total > 0 {
		fmt.Fprintf(&b, "[start_index %d is past the end of the text (%d characters).]\n", start, total)
		return tool.Result{Output: b.String(), IsError: true}
	}
	part := skipRunes(text, start)
	shown := part
	if utf8.RuneCountInString(part) > maxChars {
		shown = firstRunesOf(part, maxChars)
	}
	end := start + utf8.RuneCountInString(shown)
	if start > 0 || end < total {
		fmt.Fprintf(&b, "[Characters %d-%d of %d.", start, end, total)
		if end < total {
			fmt.Fprintf(&b, " Call web_fetch again with start_index=%d to read on.", end)
		}
		b.WriteString("]\n")
	}
	b.WriteString("\n")
	b.WriteString(shown)
	return tool.Result{Output: b.String(), IsError: res.Status >= 400}
}

func skipRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[i:]
		}
		n--
	}
	return ""
}

func firstRunesOf(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}
