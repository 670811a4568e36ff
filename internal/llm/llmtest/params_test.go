package llmtest

import (
	"net/http"
	"testing"
)

func TestRender(t *testing.T) {
	tests := []struct {
		name    string
		req     Request
		headers []string
		want    string
	}{
		{
			name: "path, query and headers",
			req: Request{Method: "POST", Path: "/v1beta/models/m:streamGenerateContent", RawQuery: "alt=sse",
				Header: http.Header{"Anthropic-Beta": {"a,b"}}, RawBody: []byte(`{"b":[1,{"c":"d e"}],"a":{}}`)},
			headers: []string{"Anthropic-Beta", "X-Absent"},
			want:    "POST /v1beta/models/m:streamGenerateContent?alt=sse\nAnthropic-Beta: a,b\nX-Absent: \n\n{\n  \"b\": [\n    1,\n    {\n      \"c\": \"d e\"\n    }\n  ],\n  \"a\": {}\n}\n",
		},
		{
			name: "trailing newline counted",
			req:  Request{Method: "POST", Path: "/v1/messages", RawBody: []byte("{\"x\":1}\n")},
			want: "POST /v1/messages\n\n{\n  \"x\": 1\n}\n(body ends with 1 newline(s))\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(render(t, tt.req, tt.headers)); got != tt.want {
				t.Errorf("render =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}
