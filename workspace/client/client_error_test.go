package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/workspace/client"
)

// TestClientErrorText: an answer that is not the API's JSON error still
// says what went wrong: plain http to an https server (Go's 400 "Client
// sent an HTTP request to an HTTPS server.") hints at https://; a text body
// gives its first line; an empty body the status text.
func TestClientErrorText(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	text := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/workspaces/empty" {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		http.Error(w, "upstream gone\nmore detail", http.StatusBadGateway)
	}))
	defer text.Close()
	for _, tc := range []struct {
		name, base, id string
		status         int
		want           string
	}{
		{"http to https", "http://" + strings.TrimPrefix(tlsSrv.URL, "https://"), "x", 400, "Client sent an HTTP request to an HTTPS server. (use an https:// address)"},
		{"text body", text.URL, "x", 502, "upstream gone"},
		{"empty body", text.URL, "empty", 502, "Bad Gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (&client.Client{Base: tc.base, Token: "t"}).Get(t.Context(), tc.id)
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != tc.status || ae.Message != tc.want {
				t.Fatalf("error %v; want HTTP %d %q", err, tc.status, tc.want)
			}
		})
	}
}
