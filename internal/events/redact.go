package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// Redacted replaces every secret removed by a Redactor.
const Redacted = "[REDACTED]"

// minSecretLen is the shortest literal secret a Redactor removes; shorter
// values would mangle ordinary text and are not credentials anyway.
const minSecretLen = 4

// sensitiveAssignment matches KEY=value and KEY: value shapes whose name ends
// with one of the sensitive suffixes of seed 000 §4 (*_API_KEY, *_SECRET,
// *_TOKEN, *_PASSWORD, *_CREDENTIAL), case-insensitively, also with the name
// quoted as in JSON or YAML. Group 1 is the name and separator, group 2 a
// double-quoted value, group 3 a single-quoted value, group 4 a bare value.
var sensitiveAssignment = regexp.MustCompile(
	`(?i)(\b[a-z0-9_.-]*(?:api_key|apikey|secret|token|password|passwd|credential|credentials)["']?\s*[=:]\s*)(?:"([^"\n]*)"|'([^'\n]*)'|([^\s"',;}&]+))`)

// sensitiveWords are the name endings sensitiveAssignment looks for, in
// lower case; hasAssignmentHint uses them as a cheap pre-check.
var sensitiveWords = [][]byte{[]byte("api_key"), []byte("apikey"), []byte("secret"), []byte("token"), []byte("password"), []byte("passwd"), []byte("credential")}

// hasAssignmentHint reports whether s may contain a sensitive assignment: a
// sensitive word followed by optional quotes (also JSON-escaped ones),
// blanks, and '=' or ':'. It never misses a match of sensitiveAssignment.
func hasAssignmentHint(s []byte) bool {
	lower := bytes.ToLower(s)
	for _, w := range sensitiveWords {
		rest := lower
		for {
			i := bytes.Index(rest, w)
			if i < 0 {
				break
			}
			rest = rest[i+len(w):]
			if w[len(w)-1] == 'l' && len(rest) > 0 && rest[0] == 's' { // credentials
				rest = rest[1:]
			}
			if assignmentFollows(rest) {
				return true
			}
		}
	}
	return false
}

func assignmentFollows(rest []byte) bool {
	for i := 0; i < len(rest); i++ {
		switch rest[i] {
		case '"', '\'', ' ', '\t', '\n', '\r', '\v', '\f':
		case '\\': // a JSON escape such as \" or \n
			i++
		case '=', ':':
			return true
		default:
			return false
		}
	}
	return false
}

// Redactor removes secrets from events: every occurrence of a literal secret
// value, and the value of every KEY=value assignment whose name looks
// sensitive. A nil *Redactor only applies the name patterns. It is safe for
// concurrent use.
type Redactor struct {
	secrets []string // longest first
	escaped [][]byte // JSON-escaped forms, for the byte pre-check
}

// NewRedactor returns a Redactor for the given literal secret values (API
// keys, tokens). Values shorter than 4 bytes are ignored.
func NewRedactor(secrets ...string) *Redactor {
	r := &Redactor{}
	seen := map[string]bool{}
	for _, s := range secrets {
		if len(s) < minSecretLen || seen[s] {
			continue
		}
		seen[s] = true
		r.secrets = append(r.secrets, s)
	}
	sort.Slice(r.secrets, func(i, j int) bool { return len(r.secrets[i]) > len(r.secrets[j]) })
	for _, s := range r.secrets {
		b, _ := json.Marshal(s) // a string always marshals
		r.escaped = append(r.escaped, b[1:len(b)-1])
	}
	return r
}

// String returns s with every secret replaced by Redacted.
func (r *Redactor) String(s string) string {
	if r != nil {
		for _, sec := range r.secrets {
			if strings.Contains(s, sec) {
				s = strings.ReplaceAll(s, sec, Redacted)
			}
		}
	}
	if !hasAssignmentHint([]byte(s)) {
		return s
	}
	return sensitiveAssignment.ReplaceAllStringFunc(s, func(m string) string {
		idx := sensitiveAssignment.FindStringSubmatchIndex(m)
		name := m[idx[2]:idx[3]]
		switch {
		case idx[4] >= 0:
			return name + `"` + Redacted + `"`
		case idx[6] >= 0:
			return name + `'` + Redacted + `'`
		default:
			return name + Redacted
		}
	})
}

// JSON returns doc with every string value (and object key) redacted, key
// order and all other tokens preserved. It returns doc itself when nothing
// in it can match, which is the common case.
func (r *Redactor) JSON(doc []byte) ([]byte, error) {
	if !r.mayMatch(doc) {
		return doc, nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var out bytes.Buffer
	out.Grow(len(doc))
	// stack of containers: for objects, whether the next string is a key.
	type frame struct {
		object bool
		n      int  // values (or keys) written so far
		key    bool // expecting a key
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("redact json: %w", err)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			out.WriteByte(byte(d))
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].key = true
			}
			continue
		}
		// separators before this token
		if len(stack) > 0 {
			f := &stack[len(stack)-1]
			switch {
			case f.object && f.key:
				if f.n > 0 {
					out.WriteByte(',')
				}
				f.n++
			case f.object:
				out.WriteByte(':')
			default:
				if f.n > 0 {
					out.WriteByte(',')
				}
				f.n++
			}
		}
		isKey := len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].key
		switch v := tok.(type) {
		case json.Delim:
			out.WriteByte(byte(v))
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].key = false
			}
			stack = append(stack, frame{object: v == '{', key: v == '{'})
			continue
		case string:
			b, err := json.Marshal(r.String(v))
			if err != nil {
				return nil, fmt.Errorf("redact json: %w", err)
			}
			out.Write(b)
		case json.Number:
			out.WriteString(v.String())
		case bool:
			if v {
				out.WriteString("true")
			} else {
				out.WriteString("false")
			}
		case nil:
			out.WriteString("null")
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = !isKey
		}
	}
	return out.Bytes(), nil
}

// mayMatch is a conservative pre-check on encoded JSON.
func (r *Redactor) mayMatch(doc []byte) bool {
	if r != nil {
		for _, e := range r.escaped {
			if bytes.Contains(doc, e) {
				return true
			}
		}
	}
	return hasAssignmentHint(doc)
}
