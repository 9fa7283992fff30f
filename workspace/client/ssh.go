package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// SSH opens an SSH connection into workspace id (its id or name): the
// server answers GET /v1/workspaces/{id}/ssh with 101 Switching Protocols
// and the connection then carries SSH (an SSH client speaks it: `gantry
// ws ssh --stdio` hands it to OpenSSH as its ProxyCommand). A refusal is
// an *APIError. Close the connection when done; ctx bounds the request
// and, the connection being its response's body, the connection too.
func (c *Client) SSH(ctx context.Context, id string) (io.ReadWriteCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+"/v1/workspaces/"+url.PathEscape(id)+"/ssh", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "ssh")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := http1Only(c.HTTP).Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, apiError(resp)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("ssh: the server switched protocols but the connection cannot be written (%T)", resp.Body)
	}
	return rwc, nil
}

// http1Only is hc (nil: the default client) speaking HTTP/1.1 only: an
// HTTP/2 stream cannot be upgraded, and net/http's client would choose
// HTTP/2 with an https server that offers it.
func http1Only(hc *http.Client) *http.Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	tr, ok := hc.Transport.(*http.Transport)
	if hc.Transport == nil {
		tr, ok = http.DefaultTransport.(*http.Transport)
	}
	if !ok {
		return hc // a transport of the caller's own: theirs to choose
	}
	tr = tr.Clone()
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	if tr.TLSClientConfig != nil { // its ALPN must not offer h2 either
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	c := *hc
	c.Transport = tr
	return &c
}
