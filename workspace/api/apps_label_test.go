package api

import (
	"slices"
	"testing"
)

// How an app host's label parses: the owner after the last "--", then the
// apps it can name, in the order resolveApp tries them (the workspace
// named by all the rest first, then {app}--{name}); a label naming none,
// or under another domain, is no app host.
func TestParseAppHost(t *testing.T) {
	for _, tc := range []struct {
		host  string
		owner string
		refs  []appRef // nil: not an app host
	}{
		{"web--alice.localhost:7480", "alice", []appRef{{"web", "main"}}},
		{"WEB--Alice.LOCALHOST", "alice", []appRef{{"web", "main"}}},
		{"api--web--alice.localhost", "alice", []appRef{{"api--web", "main"}, {"web", "api"}}},
		{"a--b--c--alice.localhost", "alice", []appRef{{"a--b--c", "main"}, {"b--c", "a"}}},
		{"main--web--alice.localhost", "alice", []appRef{{"main--web", "main"}}}, // main has no second host
		{"-x--web--alice.localhost", "alice", []appRef{{"-x--web", "main"}}},     // no app starts with '-'
		{"web--alice.example.com", "", nil},
		{"web--alice.sub.localhost", "", nil},
		{"web.localhost", "", nil},
		{"--alice.localhost", "", nil},
		{"web--alice-.localhost", "", nil}, // an owner ending in '-' has no label
		{"web_x--alice.localhost", "", nil},
		{"localhost", "", nil},
		{"a234567890123456789012345678901234567890123456789012345678--alice.localhost", "", nil}, // 64 characters
	} {
		h, ok := parseAppHost(tc.host, "localhost")
		if ok != (tc.refs != nil) {
			t.Errorf("%s: app host %v, want %v", tc.host, ok, tc.refs != nil)
			continue
		}
		if ok && (h.owner != tc.owner || !slices.Equal(h.refs(), tc.refs)) {
			t.Errorf("%s: owner %q refs %v, want %q %v", tc.host, h.owner, h.refs(), tc.owner, tc.refs)
		}
	}
}
