package webfetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html/charset"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Defaults and caps of a fetch.
const (
	// DefaultMaxBytes is the body limit of a request without one.
	DefaultMaxBytes = 2 << 20
	// MaxMaxBytes caps a request's body limit.
	MaxMaxBytes = 16 << 20
	// DefaultTimeout bounds a request without a timeout.
	DefaultTimeout = 30 * time.Second
	// MaxTimeout caps a request's timeout.
	MaxTimeout = 5 * time.Minute
	// MaxRedirects is how many redirects a fetch follows.
	MaxRedirects = 5
	// UserAgent is sent with every request.
	UserAgent = "agent-operator-web-fetch/1"
)

// ErrUnsupportedType is wrapped by errors of fetches whose response is not
// text (images, PDFs, archives, ...); the body is not read.
var ErrUnsupportedType = errors.New("unsupported content type")

// ErrTooManyRedirects is wrapped by errors of fetches redirected more than
// MaxRedirects times.
var ErrTooManyRedirects = errors.New("too many redirects")

// ErrBadURL is wrapped by errors of requests whose URL is not an absolute
// http or https URL.
var ErrBadURL = errors.New("not an http or https URL")

// Fetch performs req: a GET of req.URL, following up to MaxRedirects
// redirects, with every dialled address checked against req's address
// rules. A response of any status is a result (Status says which); errors
// are reserved for fetches that got no usable response: a bad URL, a refused
// address, a timeout (wrapping context.DeadlineExceeded), a non-text body.
func Fetch(ctx context.Context, req tool.FetchRequest) (*tool.FetchResult, error) {
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("fetch %q: %w", req.URL, ErrBadURL)
	}
	if u.User != nil {
		return nil, fmt.Errorf("fetch %q: %w: credentials in the URL are not supported", redact(u), ErrBadURL)
	}
	maxBytes := req.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	maxBytes = min(maxBytes, MaxMaxBytes)
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	timeout = min(timeout, MaxTimeout)

	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%w: the fetch took longer than %s", context.DeadlineExceeded, timeout))
	defer cancel()

	g := guard{allowPrivate: req.AllowPrivate, allow: parseAllowList(req.AllowHosts)}
	tr := &http.Transport{
		Proxy:                  nil, // the address check must see the real destination
		DialContext:            g.dial,
		ForceAttemptHTTP2:      true,
		MaxResponseHeaderBytes: 1 << 20,
		DisableKeepAlives:      true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport: tr,
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) > MaxRedirects {
				return fmt.Errorf("%w: stopped after %d", ErrTooManyRedirects, MaxRedirects)
			}
			if r.URL.Scheme != "http" && r.URL.Scheme != "https" {
				return fmt.Errorf("redirect to %q: %w", r.URL.Redacted(), ErrBadURL)
			}
			return nil
		},
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", redact(u), err)
	}
	hreq.Header.Set("User-Agent", UserAgent)
	hreq.Header.Set("Accept", "text/html,application/xhtml+xml,text/markdown,text/plain;q=0.9,*/*;q=0.5")
	resp, err := client.Do(hreq)
	if err != nil {
		return nil, fetchError(ctx, u, err)
	}
	defer resp.Body.Close()

	res := &tool.FetchResult{URL: resp.Request.URL.String(), Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type")}
	mediaType, params, _ := mime.ParseMediaType(res.ContentType)
	if mediaType != "" && classify(mediaType) == kindBinary {
		return nil, unsupported(u, mediaType) // the body is never read
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return nil, fetchError(ctx, u, err)
	}
	if int64(len(body)) > maxBytes {
		body, res.Truncated = body[:maxBytes], true
	}
	res.Bytes = int64(len(body))
	if mediaType == "" {
		mediaType, params, _ = mime.ParseMediaType(http.DetectContentType(body))
	}
	kind := classify(mediaType)
	if kind == kindBinary {
		return nil, unsupported(u, mediaType)
	}
	text := decode(body, params["charset"], res.Truncated)
	if kind == kindHTML {
		text = HTMLToMarkdown(text, resp.Request.URL)
	}
	res.Text = text
	return res, nil
}

func unsupported(u *url.URL, mediaType string) error {
	return fmt.Errorf("fetch %s: %w %q: web_fetch returns text only", redact(u), ErrUnsupportedType, mediaType)
}

// fetchError explains a failed request, preferring the timeout as the cause.
func fetchError(ctx context.Context, u *url.URL, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("fetch %s: %w", redact(u), context.Cause(ctx))
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its message repeats the URL
	}
	return fmt.Errorf("fetch %s: %w", redact(u), err)
}

func redact(u *url.URL) string { return u.Redacted() }

type contentKind int

const (
	kindBinary contentKind = iota
	kindText
	kindHTML
)

// classify sorts a media type into HTML, other text or binary.
func classify(mediaType string) contentKind {
	mt := strings.ToLower(mediaType)
	switch {
	case mt == "text/html", mt == "application/xhtml+xml":
		return kindHTML
	case strings.HasPrefix(mt, "text/"),
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"), strings.HasSuffix(mt, "+yaml"),
		mt == "application/json", mt == "application/xml", mt == "application/javascript",
		mt == "application/ecmascript", mt == "application/x-yaml", mt == "application/yaml",
		mt == "application/toml", mt == "application/x-sh", mt == "application/sql",
		mt == "application/graphql", mt == "application/x-ndjson", mt == "application/jsonl":
		return kindText
	}
	return kindBinary
}

// decode returns body as valid UTF-8, converting from its declared charset.
// A truncated body may end in the middle of a character, which is dropped.
func decode(body []byte, cs string, truncated bool) string {
	if cs != "" && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		if r, err := charset.NewReaderLabel(cs, bytes.NewReader(body)); err == nil {
			if b, err := io.ReadAll(r); err == nil {
				body = b
			}
		}
	}
	if truncated {
		for i := 0; i < utf8.UTFMax && len(body) > 0; i++ {
			r, size := utf8.DecodeLastRune(body)
			if r != utf8.RuneError || size > 1 {
				break
			}
			body = body[:len(body)-1]
		}
	}
	return strings.ToValidUTF8(string(body), "\uFFFD")
}

// guard dials with the address rules of one request.
type guard struct {
	allowPrivate bool
	allow        allowList
}

// dial connects to addr, refusing (at connect time, on the resolved
// address) internal addresses that are not allowed.
func (g guard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	byName := g.allowPrivate || g.allow.name(host)
	d := &net.Dialer{
		Control: func(_, address string, _ syscall.RawConn) error {
			h, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(h)
			if err != nil {
				return fmt.Errorf("dial %s: unexpected address %q", host, address)
			}
			if byName || addrClass(ip) == "" || g.allow.addr(ip) {
				return nil
			}
			return &refusedError{host: host, ip: ip.Unmap().WithZone("")}
		},
	}
	return d.DialContext(ctx, network, addr)
}
