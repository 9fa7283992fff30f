package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/provider"
)

// Client talks to the API.
type Client struct {
	Base  string // "http://127.0.0.1:7480" or "https://…"
	Token string // the API token secret, sent as Authorization: Bearer
	HTTP  *http.Client
}

// NewHTTPClient is an HTTP client that trusts the PEM certificates in
// caFile ("" = the system pool).
func NewHTTPClient(caFile string) (*http.Client, error) {
	if caFile == "" {
		return &http.Client{}, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-cert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca-cert %s: no PEM certificate in it", caFile)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr}, nil
}

// APIError is a non-2xx answer.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("server: %s (HTTP %d)", e.Message, e.Status) }

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	resp, err := c.send(ctx, method, path, "application/json", rd)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// send makes one request with the client's token; a non-2xx answer is an
// *APIError (its body read and closed), else the caller closes the body.
func (c *Client) send(ctx context.Context, method, path, contentType string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, apiError(resp)
	}
	return resp, nil
}

// Create creates a workspace.
func (c *Client) Create(ctx context.Context, n workspace.NewWorkspace) (workspace.Workspace, error) {
	var w workspace.Workspace
	return w, c.do(ctx, "POST", "/v1/workspaces", n, &w)
}

// List lists workspaces.
func (c *Client) List(ctx context.Context) ([]workspace.Workspace, error) {
	var ws []workspace.Workspace
	return ws, c.do(ctx, "GET", "/v1/workspaces", nil, &ws)
}

// PoolMembers lists the warm pools' unclaimed members (admin: only an
// admin token sees workspaces that are not its own).
func (c *Client) PoolMembers(ctx context.Context) ([]workspace.Workspace, error) {
	var ws []workspace.Workspace
	return ws, c.do(ctx, "GET", "/v1/workspaces?pool=true", nil, &ws)
}

// Get reads one workspace (by id or name).
func (c *Client) Get(ctx context.Context, id string) (workspace.Workspace, error) {
	var w workspace.Workspace
	return w, c.do(ctx, "GET", "/v1/workspaces/"+url.PathEscape(id), nil, &w)
}

// SetDesired sets the desired state.
func (c *Client) SetDesired(ctx context.Context, id string, st workspace.Status) (workspace.Workspace, error) {
	var w workspace.Workspace
	return w, c.do(ctx, "PUT", "/v1/workspaces/"+url.PathEscape(id)+"/desired", api.DesiredRequest{DesiredState: string(st)}, &w)
}

// Update changes a workspace's image, command, environment or limits; they
// take effect at its next start.
func (c *Client) Update(ctx context.Context, id string, u workspace.SpecUpdate) (workspace.Workspace, error) {
	var w workspace.Workspace
	return w, c.do(ctx, "PATCH", "/v1/workspaces/"+url.PathEscape(id), u, &w)
}

// Archives lists a workspace's archives, newest first.
func (c *Client) Archives(ctx context.Context, id string) ([]provider.ArchiveInfo, error) {
	var out []provider.ArchiveInfo
	return out, c.do(ctx, "GET", "/v1/workspaces/"+url.PathEscape(id)+"/archives", nil, &out)
}

// Restore makes archive key the one the workspace's next restore (ws up)
// uses; the workspace must be archived (PENDING).
func (c *Client) Restore(ctx context.Context, id, key string) (workspace.Workspace, error) {
	var w workspace.Workspace
	return w, c.do(ctx, "POST", "/v1/workspaces/"+url.PathEscape(id)+"/restore", api.RestoreRequest{Archive: key}, &w)
}

// Fork makes a new workspace with a copy of id's files and spec
// (api.ForkRequest: archive "" takes them from a stopped or archived
// workspace, "latest" or a key from that archive of it).
func (c *Client) Fork(ctx context.Context, id string, req api.ForkRequest) (workspace.Workspace, error) {
	var w workspace.Workspace
	return w, c.do(ctx, "POST", "/v1/workspaces/"+url.PathEscape(id)+"/fork", req, &w)
}

// Recover clears a workspace's error.
func (c *Client) Recover(ctx context.Context, id string) (workspace.Workspace, error) {
	var w workspace.Workspace
	return w, c.do(ctx, "POST", "/v1/workspaces/"+url.PathEscape(id)+"/recover", nil, &w)
}

// Delete asks for the workspace's deletion.
func (c *Client) Delete(ctx context.Context, id string) (workspace.Workspace, error) {
	var w workspace.Workspace
	return w, c.do(ctx, "DELETE", "/v1/workspaces/"+url.PathEscape(id), nil, &w)
}

// Touch records activity on a workspace (resets its TTL idle clock).
func (c *Client) Touch(ctx context.Context, id string) error {
	return c.do(ctx, "POST", "/v1/workspaces/"+url.PathEscape(id)+"/touch", nil, nil)
}

// ListOwned lists owner's workspaces (an admin token may name any owner).
func (c *Client) ListOwned(ctx context.Context, owner string) ([]workspace.Workspace, error) {
	var ws []workspace.Workspace
	return ws, c.do(ctx, "GET", "/v1/workspaces?owner="+url.QueryEscape(owner), nil, &ws)
}

// Whoami tells who the client's token is.
func (c *Client) Whoami(ctx context.Context) (api.Whoami, error) {
	var w api.Whoami
	return w, c.do(ctx, "GET", "/v1/whoami", nil, &w)
}

// CreateToken makes a token (admin); the answer carries its secret, once.
func (c *Client) CreateToken(ctx context.Context, req api.TokenRequest) (api.TokenInfo, error) {
	var t api.TokenInfo
	return t, c.do(ctx, "POST", "/v1/tokens", req, &t)
}

// Tokens lists the tokens (admin), without secrets.
func (c *Client) Tokens(ctx context.Context) ([]api.TokenInfo, error) {
	var ts []api.TokenInfo
	return ts, c.do(ctx, "GET", "/v1/tokens", nil, &ts)
}

// RevokeToken revokes a token (admin); it fails from its next request on.
func (c *Client) RevokeToken(ctx context.Context, id string) (api.TokenInfo, error) {
	var t api.TokenInfo
	return t, c.do(ctx, "DELETE", "/v1/tokens/"+url.PathEscape(id), nil, &t)
}

// Audit reads the audit log (admin).
func (c *Client) Audit(ctx context.Context, f AuditQuery) ([]auth.AuditEntry, error) {
	q := url.Values{}
	for k, v := range map[string]string{"workspace": f.Workspace, "owner": f.Owner, "since": f.Since} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", fmt.Sprint(f.Limit))
	}
	var es []auth.AuditEntry
	return es, c.do(ctx, "GET", "/v1/audit?"+q.Encode(), nil, &es)
}

// AuditQuery selects audit rows: Since is a duration back from now ("24h")
// or an RFC 3339 time.
type AuditQuery struct {
	Workspace, Owner, Since string
	Limit                   int
}

// Logs copies the workspace command's output to w: the last tail lines
// (0: all), then with follow what comes next until ctx ends.
func (c *Client) Logs(ctx context.Context, id string, tail int, follow bool, w io.Writer) error {
	q := url.Values{}
	if tail > 0 {
		q.Set("tail", fmt.Sprint(tail))
	}
	if follow {
		q.Set("follow", "1")
	}
	resp, err := c.send(ctx, "GET", "/v1/workspaces/"+url.PathEscape(id)+"/logs?"+q.Encode(), "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	if ctx.Err() != nil {
		return nil // followed until the caller stopped
	}
	if why := resp.Trailer.Get(api.LogEndTrailer); err == nil && why != "" {
		return fmt.Errorf("logs of %s ended by the server: %s", id, why)
	}
	return err
}

// apiError reads a non-2xx answer's {"error": …}.
func apiError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var e struct{ Error string }
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	// Not one of the API's answers (a proxy in front, or plain http to the
	// https port: Go's TLS server answers 400 "Client sent an HTTP request
	// to an HTTPS server."): its text, or the status's.
	msg, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	if strings.Contains(msg, "HTTP request to an HTTPS server") {
		msg += " (use an https:// address)"
	}
	return &APIError{Status: resp.StatusCode, Message: msg}
}
