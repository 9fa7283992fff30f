package client

import (
	"context"
	"net/url"
	"strconv"

	"github.com/gantryhq/gantry/workspace"
)

// CreateTemplate creates template t (version 1; admin).
func (c *Client) CreateTemplate(ctx context.Context, t workspace.Template) (workspace.Template, error) {
	var out workspace.Template
	return out, c.do(ctx, "POST", "/v1/templates", t, &out)
}

// UpdateTemplate writes t as a new version of its name (admin).
func (c *Client) UpdateTemplate(ctx context.Context, t workspace.Template) (workspace.Template, error) {
	var out workspace.Template
	return out, c.do(ctx, "PUT", "/v1/templates/"+url.PathEscape(t.Name), t, &out)
}

// Templates lists the latest version of every template.
func (c *Client) Templates(ctx context.Context) ([]workspace.Template, error) {
	var out []workspace.Template
	return out, c.do(ctx, "GET", "/v1/templates", nil, &out)
}

// Template reads version of template name (0 = the latest).
func (c *Client) Template(ctx context.Context, name string, version int) (workspace.Template, error) {
	path := "/v1/templates/" + url.PathEscape(name)
	if version > 0 {
		path += "?version=" + strconv.Itoa(version)
	}
	var out workspace.Template
	return out, c.do(ctx, "GET", path, nil, &out)
}

// TemplateVersions lists every version of template name, newest first.
func (c *Client) TemplateVersions(ctx context.Context, name string) ([]workspace.Template, error) {
	var out []workspace.Template
	return out, c.do(ctx, "GET", "/v1/templates/"+url.PathEscape(name)+"/versions", nil, &out)
}

// DeleteTemplate deletes every version of template name (admin); refused
// while a workspace uses it.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/templates/"+url.PathEscape(name), nil, nil)
}

// SetPool sizes template name's warm pool (admin; 0 drains it).
func (c *Client) SetPool(ctx context.Context, name string, size int) (workspace.PoolStatus, error) {
	var out workspace.PoolStatus
	return out, c.do(ctx, "PUT", "/v1/templates/"+url.PathEscape(name)+"/pool", map[string]int{"size": size}, &out)
}

// Pool reads template name's warm pool.
func (c *Client) Pool(ctx context.Context, name string) (workspace.PoolStatus, error) {
	var out workspace.PoolStatus
	return out, c.do(ctx, "GET", "/v1/templates/"+url.PathEscape(name)+"/pool", nil, &out)
}
