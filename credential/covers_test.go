package credential

import "testing"

// A credential for https://api.example.com/api goes only to paths below
// /api as the server will read them: a dot segment, in any spelling a
// server resolves, is covered by no resource with a path.
func TestCoversDotSegments(t *testing.T) {
	const res = "https://api.example.com/api"
	for _, tt := range []struct {
		url  string
		want bool
	}{
		{"https://api.example.com/api", true},
		{"https://api.example.com/api/", true},
		{"https://api.example.com/api/x?q=1", true},
		{"https://API.example.com:443/api/x", true},
		{"https://api.example.com/api/v1.2/x", true},
		{"https://api.example.com/api/...", true}, // not a dot segment
		{"https://api.example.com/api/.well/x", true},
		{"https://api.example.com/apix", false},
		{"https://api.example.com/x", false},
		{"http://api.example.com/api/x", false},
		{"https://api.example.com:8443/api/x", false},
		{"https://api.example.com/api/../x", false},
		{"https://api.example.com/api/./x", false},
		{"https://api.example.com/api/..", false},
		{"https://api.example.com/api/%2e%2e/x", false},
		{"https://api.example.com/api/%2E%2E/x", false},
		{"https://api.example.com/api/.%2e/x", false},
		{"https://api.example.com/api/%2e/x", false},
		{"https://api.example.com/api/%252e%252e/x", false},
		{"https://api.example.com/api/%2e%2e%2fx", false},
		{"https://api.example.com/api/..%2fx", false},
		{"https://api.example.com/api/..%5cx", false},
		{"https://api.example.com/api/..;/x", false},
		{"https://api.example.com/api/sub/..;jsessionid=1/x", false},
	} {
		if got := covers(res, tt.url); got != tt.want {
			t.Errorf("covers(%q, %q) = %v, want %v", res, tt.url, got, tt.want)
		}
	}
	// A resource without a path covers the whole origin: dot segments
	// cannot leave it.
	if !covers("https://api.example.com", "https://api.example.com/a/../b") {
		t.Error("a resource without a path does not cover its origin")
	}
}
