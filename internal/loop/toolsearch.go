package loop

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// ToolSearchToolName is the tool that loads deferred tools (seed 004
// "tool_search").
const ToolSearchToolName = "tool_search"

// Defaults of ToolSearchConfig, chosen with BenchmarkToolSearchPromptTokens
// (docs/design.md "tool_search").
const (
	// DefaultToolSearchThreshold: more extra tools than this are deferred.
	DefaultToolSearchThreshold = 40
	// DefaultToolSearchThresholdBytes: extra tools whose definitions (name,
	// description and JSON Schema) add up to more bytes than this are
	// deferred, however few they are.
	DefaultToolSearchThresholdBytes = 32 << 10
	// DefaultToolSearchResults is how many tools one search returns unless
	// the model asks for another number (at most MaxToolSearchResults).
	DefaultToolSearchResults = 5
	// MaxToolSearchResults bounds the tools one search returns.
	MaxToolSearchResults = 20
)

// catalogueDescriptionChars bounds a deferred tool's description in the
// catalogue of the system prompt.
const catalogueDescriptionChars = 100

// ToolSearchConfig says when the tools of WithExtraTools are deferred: past
// Threshold tools or ThresholdBytes bytes of definitions, none of them is
// sent as a tool definition; the system prompt lists their names and
// one-line descriptions, and the tool_search tool returns the full
// definitions of the ones the model asks for, which are sent as ordinary
// tool definitions (and are callable) from the next model request on.
type ToolSearchConfig struct {
	// Disabled sends every extra tool's definition on every request.
	Disabled bool
	// Threshold is the number of extra tools above which they are deferred
	// (0 means DefaultToolSearchThreshold).
	Threshold int
	// ThresholdBytes is the size of the extra tools' definitions above
	// which they are deferred (0 means DefaultToolSearchThresholdBytes).
	ThresholdBytes int
}

// WithToolSearch configures when extra tools are deferred behind
// tool_search (default: ToolSearchConfig{}, on at the default thresholds).
func WithToolSearch(c ToolSearchConfig) Option {
	return func(o *options) error {
		if c.Threshold < 0 || c.ThresholdBytes < 0 {
			return fmt.Errorf("tool search thresholds must not be negative (%d tools, %d bytes)", c.Threshold, c.ThresholdBytes)
		}
		o.toolSearch = c
		return nil
	}
}

// deferredTools is the state of tool search. The catalogue is fixed when
// the session is created, and rebuilt only when the tools of a source of
// WithExtraToolSource change; the loaded tools only grow, in a stable
// order, so the tool list stays a cacheable prefix (tools a source stopped
// offering leave it).
type deferredTools struct {
	// index maps each deferred tool's name to its place in the catalogue.
	index map[string]int
	names []string
	text  []string // each tool's description, lowercased, for search
	// catalogue is the system prompt section listing the deferred tools.
	catalogue string

	// Guarded by Session.mu. found are the tools tool_search returned since
	// the last model request; they join loaded (in catalogue order) when
	// the next request is built, so a call in the same round as the search
	// fails the same way every time.
	found  map[string]bool
	loaded []string
	isLoad map[string]bool
}

// setupToolSearch decides whether the extra tools are deferred and, if
// they are, registers tool_search.
func (s *Session) setupToolSearch(c ToolSearchConfig, extra []tool.Registered) error {
	if c.Disabled || len(extra) == 0 {
		return nil
	}
	if c.Threshold == 0 {
		c.Threshold = DefaultToolSearchThreshold
	}
	if c.ThresholdBytes == 0 {
		c.ThresholdBytes = DefaultToolSearchThresholdBytes
	}
	mine := make(map[string]bool, len(extra))
	for _, t := range extra {
		mine[t.Definition.Name] = true
	}
	defs := s.deferrable(mine)
	bytes := 0
	for _, d := range defs {
		bytes += len(d.Name) + len(d.Description) + len(d.Parameters)
	}
	if len(defs) <= c.Threshold && bytes <= c.ThresholdBytes {
		return nil
	}
	if mine[ToolSearchToolName] {
		return fmt.Errorf("tool search: an extra tool is named %s; rename it or disable tool search", ToolSearchToolName)
	}
	s.deferred = newDeferredTools(defs)
	return s.extra.Register(tool.Registered{
		Definition: tool.Definition{
			Name: ToolSearchToolName,
			Description: "Load deferred tools (listed by name under \"Deferred tools\" in the system prompt). " +
				"Returns the full definitions of the best matches; they are callable from your next turn, not in this one.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"query":{"type":"string","minLength":1,"description":"Keywords matched against tool names and descriptions, ` +
				`or \"select:name1,name2\" to load tools by exact name."},` +
				`"max_results":{"type":"integer","minimum":1,"maximum":` + fmt.Sprint(MaxToolSearchResults) +
				`,"description":"At most this many tools (default ` + fmt.Sprint(DefaultToolSearchResults) + `)."}},` +
				`"required":["query"]}`),
		},
		Executor:   s.runToolSearch,
		Idempotent: true,
	})
}

// deferrable returns the definitions of the registered extra tools named
// in mine, in registration order, without those a profile tool of the same
// name shadows (session tools such as todo are never in mine).
func (s *Session) deferrable(mine map[string]bool) []tool.Definition {
	var defs []tool.Definition
	for _, d := range s.extra.Definitions() {
		if _, shadowed := s.profile.Registry().Get(d.Name); shadowed || !mine[d.Name] {
			continue // a profile tool of the same name wins; session tools stay
		}
		defs = append(defs, d)
	}
	return defs
}

// newDeferredTools builds the catalogue of defs; none is loaded.
func newDeferredTools(defs []tool.Definition) *deferredTools {
	d := &deferredTools{index: make(map[string]int, len(defs)), found: map[string]bool{}, isLoad: map[string]bool{}}
	var b strings.Builder
	b.WriteString("## Deferred tools\n\nThese tools are available, but their definitions are not loaded. To use one, call " +
		ToolSearchToolName + " with keywords or \"select:<name>,<name>\"; the tools it returns are callable from your next turn.\n\n")
	for i, def := range defs {
		d.index[def.Name] = i
		d.names = append(d.names, def.Name)
		d.text = append(d.text, strings.ToLower(def.Description))
		fmt.Fprintf(&b, "- %s: %s\n", def.Name, summaryLine(def.Description))
	}
	d.catalogue = strings.TrimSuffix(b.String(), "\n")
	return d
}

// rebuildToolSearch rebuilds the catalogue after the tools of a source
// changed: every current extra tool is deferred, the tools loaded (or
// found) before stay loaded (found) when they still exist, and the system
// prompt gets the new catalogue. Whether tools are deferred at all is
// decided once, when the session is created: a session under the
// thresholds then sends every tool a source adds later.
func (s *Session) rebuildToolSearch() {
	if s.deferred == nil {
		return
	}
	mine := make(map[string]bool, len(s.staticExtra))
	for n := range s.staticExtra {
		mine[n] = true
	}
	for _, ts := range s.sources {
		for _, n := range ts.names {
			mine[n] = true
		}
	}
	d := newDeferredTools(s.deferrable(mine))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.deferred.loaded {
		if _, ok := d.index[n]; ok {
			d.loaded = append(d.loaded, n)
			d.isLoad[n] = true
		}
	}
	for n := range s.deferred.found {
		if _, ok := d.index[n]; ok && !d.isLoad[n] {
			d.found[n] = true
		}
	}
	s.deferred = d
	if s.prompt != nil {
		s.prompt.DeferredTools = d.catalogue
	}
}

// summaryLine is the first sentence of a description, on one line, at most
// catalogueDescriptionChars bytes (cut at a word, marked "...").
func summaryLine(desc string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(desc), "\n")
	line = strings.Join(strings.Fields(line), " ")
	if i := strings.Index(line, ". "); i >= 0 {
		line = line[:i+1]
	}
	if len(line) <= catalogueDescriptionChars {
		return line
	}
	cut := strings.LastIndexByte(line[:catalogueDescriptionChars], ' ')
	if cut <= 0 {
		cut = catalogueDescriptionChars
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
	}
	return line[:cut] + "..."
}

// toolSearchResult is tool_search's output (JSON). Restore reads the names
// back from the journal to rebuild the loaded tools.
type toolSearchResult struct {
	Tools    []tool.Definition `json:"tools"`
	NotFound []string          `json:"not_found,omitempty"`
	Note     string            `json:"note"`
}

func (s *Session) runToolSearch(_ context.Context, inv *tool.Invocation) (tool.Result, error) {
	var args struct {
		Query      string `json:"query"`
		MaxResults int    `json:"max_results"`
	}
	if err := json.Unmarshal(inv.Arguments, &args); err != nil {
		return tool.Result{Output: "invalid arguments: " + err.Error(), IsError: true}, nil
	}
	if args.MaxResults == 0 {
		args.MaxResults = DefaultToolSearchResults
	}
	names, missing := s.deferred.search(args.Query, min(args.MaxResults, MaxToolSearchResults))
	if len(names) == 0 {
		msg := fmt.Sprintf("no deferred tool matches %q; the system prompt lists them all under \"Deferred tools\": "+
			"try other keywords or select:<exact name>", args.Query)
		if len(missing) > 0 {
			msg = fmt.Sprintf("no deferred tool is named %s; the system prompt lists them all under \"Deferred tools\"",
				strings.Join(missing, ", "))
		}
		return tool.Result{Output: msg, IsError: true}, nil
	}
	out := toolSearchResult{NotFound: missing,
		Note: "These tools are callable from your next turn; call them by name with arguments matching their parameters."}
	for _, n := range names {
		if t, ok := s.extra.Get(n); ok {
			out.Tools = append(out.Tools, t.Definition)
		}
	}
	s.markFound(names)
	b, err := json.Marshal(out)
	if err != nil {
		return tool.Result{}, fmt.Errorf("encode tool definitions: %w", err)
	}
	return tool.Result{Output: string(b)}, nil
}

// search returns the deferred tools query names ("select:a,b", exact
// names) or the best keyword matches, at most limit, and the selected names
// that are not deferred tools.
func (d *deferredTools) search(query string, limit int) (names, missing []string) {
	q := strings.TrimSpace(query)
	if rest, ok := strings.CutPrefix(q, "select:"); ok {
		for n := range strings.SplitSeq(rest, ",") {
			n = strings.TrimSpace(n)
			switch _, ok := d.index[n]; {
			case n == "" || slices.Contains(names, n):
			case ok && len(names) < MaxToolSearchResults:
				names = append(names, n)
			case !ok:
				missing = append(missing, n)
			}
		}
		return names, missing
	}
	if _, ok := d.index[q]; ok {
		return []string{q}, nil
	}
	terms := strings.FieldsFunc(strings.ToLower(q), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '-'
	})
	type hit struct {
		name  string
		score int
	}
	var hits []hit
	for i, n := range d.names {
		score := 0
		for _, t := range terms {
			if strings.Contains(strings.ToLower(n), t) {
				score += 3 // a name says more than a description
			}
			if strings.Contains(d.text[i], t) {
				score++
			}
		}
		if score > 0 {
			hits = append(hits, hit{n, score})
		}
	}
	slices.SortStableFunc(hits, func(a, b hit) int { return cmp.Compare(b.score, a.score) })
	for _, h := range hits[:min(len(hits), limit)] {
		names = append(names, h.name)
	}
	return names, nil
}

// markFound records the tools a search returned; they load at the next
// model request.
func (s *Session) markFound(names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		if !s.deferred.isLoad[n] {
			s.deferred.found[n] = true
		}
	}
}

// loadFoundLocked makes the tools found since the last model request
// callable, in catalogue order, after the ones loaded before.
func (s *Session) loadFoundLocked() {
	d := s.deferred
	if d == nil || len(d.found) == 0 {
		return
	}
	names := make([]string, 0, len(d.found))
	for n := range d.found {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(d.index[a], d.index[b]) })
	for _, n := range names {
		d.loaded = append(d.loaded, n)
		d.isLoad[n] = true
	}
	clear(d.found)
}

// loadFound is loadFoundLocked for callers without the lock.
func (s *Session) loadFound() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loadFoundLocked()
}

// deferredOut reports whether name is a deferred tool that is not loaded
// (it is neither offered to the model nor callable).
func (s *Session) deferredOut(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deferred == nil {
		return false
	}
	if _, ok := s.deferred.index[name]; !ok {
		return false
	}
	return !s.deferred.isLoad[name]
}

// loadedTools returns the deferred tools loaded so far, in load order.
func (s *Session) loadedTools() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deferred == nil {
		return nil
	}
	return slices.Clone(s.deferred.loaded)
}

// notLoadedMessage is the error result of a call to a deferred tool that
// tool_search has not loaded.
func notLoadedMessage(name string) string {
	return fmt.Sprintf("Tool error (%s): this tool is deferred and its definition is not loaded yet. "+
		"Call %s with query \"select:%s\" first; the tool is callable from the turn after that.", name, ToolSearchToolName, name)
}

// restoreToolSearch marks the tools a journaled tool_search returned as
// found, as the live session did when it ran.
func (s *Session) restoreToolSearch(d EventData) {
	if s.deferred == nil || d.ToolName != ToolSearchToolName || d.IsError || d.Error != "" {
		return
	}
	var out toolSearchResult
	if json.Unmarshal([]byte(d.Output), &out) != nil {
		return
	}
	for _, t := range out.Tools {
		if _, ok := s.deferred.index[t.Name]; ok && !s.deferred.isLoad[t.Name] {
			s.deferred.found[t.Name] = true
		}
	}
}

// DeferredTools returns the names of the extra tools deferred behind
// tool_search (nil when none is) and those loaded so far, in load order.
func (s *Session) DeferredTools() (deferred, loaded []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deferred == nil {
		return nil, nil
	}
	return slices.Clone(s.deferred.names), slices.Clone(s.deferred.loaded)
}
