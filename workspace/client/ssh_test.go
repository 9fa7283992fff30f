package client_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gantryhq/gantry/workspace/client"
)

// Against an https server that offers HTTP/2, SSH still upgrades: it asks
// for HTTP/1.1 (an HTTP/2 stream cannot be hijacked).
func TestSSHUpgradesOverHTTPSWithHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 1 || r.Header.Get("Upgrade") != "ssh" {
			http.Error(w, `{"error":"not an upgrade"}`, http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ssh\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw) // an echo
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c := &client.Client{Base: srv.URL, HTTP: srv.Client()}
	conn, err := c.SSH(t.Context(), "w")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "SSH-2.0-test\r\n")
	buf := make([]byte, 14)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "SSH-2.0-test\r\n" {
		t.Fatalf("the echo: %q %v", buf, err)
	}
}
