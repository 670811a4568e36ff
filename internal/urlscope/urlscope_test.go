package urlscope

import "testing"

func TestAllows(t *testing.T) {
	cases := []struct {
		list, target string
		want         bool
	}{
		{"https://git.example.com", "https://git.example.com/org/app.git", true},
		{"https://git.example.com/org/", "https://git.example.com/org/app.git", true},
		{"https://git.example.com/org", "https://git.example.com/organisation/app.git", false}, // a name prefix is no path prefix
		{"https://git.example.com/org", "https://git.example.com/org/../other/app.git", false},
		{"https://git.example.com", "http://git.example.com/app.git", false},
		{"https://git.example.com", "https://git.example.com:8443/app.git", false},
		{"https://git.example.com", "https://evil.example/app.git", false},
		{"https://git.example.com", "https://user:pw@git.example.com/app.git", false},
		{"https://a.example, http://b.example:8080/x", "http://b.example:8080/x/y", true},
		{"https://a.example\nhttps://c.example", "https://c.example/", true},
		{"ftp://a.example", "ftp://a.example/x", false},
		{"", "https://a.example", false},
	}
	for _, tc := range cases {
		if got := Allows(tc.list, tc.target); got != tc.want {
			t.Errorf("Allows(%q, %q) = %t, want %t", tc.list, tc.target, got, tc.want)
		}
	}
}
