package taskq

import (
	"fmt"
	"strings"

	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// MaxTenantDepth is the most segments a tenant path may have
// (org/team/user/…): the tenant tree's depth.
const MaxTenantDepth = 4

// checkTenant checks a tenant name (field says what it names): a name
// (checkName), and if it holds a '/', a path of 1..MaxTenantDepth
// non-empty segments.
func checkTenant(field, t string) error {
	if err := checkName(field, t); err != nil {
		return err
	}
	if !strings.Contains(t, "/") {
		return nil
	}
	segs := strings.Split(t, "/")
	if len(segs) > MaxTenantDepth {
		return fmt.Errorf("%w: %s path %q has %d segments, at most %d", ErrInvalidTask, field, t, len(segs), MaxTenantDepth)
	}
	for _, s := range segs {
		if s == "" {
			return fmt.Errorf("%w: %s path %q has an empty segment", ErrInvalidTask, field, t)
		}
	}
	return nil
}

// NodeStats is one inner node of a queue's tenant tree (a path prefix such
// as "acme" or "acme/web"): the sums over the tenants below it and its
// weight among its siblings.
type NodeStats struct {
	Pending   int64      `json:"pending"`
	Active    int64      `json:"active"`
	Completed int64      `json:"completed"`
	Tenants   int        `json:"tenants"` // path tenants below it
	Weight    float64    `json:"weight"`
	Limit     *LimitInfo `json:"limit,omitempty"` // the node's limit: for all the tenants below it
}

// treeStats sums the path tenants of ts into their inner nodes (nil if no
// tenant is a path).
func treeStats(ts map[string]TenantStats) map[string]NodeStats {
	var out map[string]NodeStats
	for t, s := range ts {
		for i := 0; i < len(t); i++ {
			if t[i] != '/' {
				continue
			}
			if out == nil {
				out = map[string]NodeStats{}
			}
			n := out[t[:i]]
			n.Pending += s.Pending
			n.Active += s.Active
			n.Completed += s.Completed
			n.Tenants++
			n.Weight = 1
			out[t[:i]] = n
		}
	}
	return out
}

// addLimit files the limit li of a tenant or node into qs: a name that is
// an inner node of the tree and no tenant of its own goes to qs.Tree.
func addLimit(qs *QueueStats, li LimitInfo) {
	if n, ok := qs.Tree[li.Tenant]; ok {
		if _, own := qs.Tenants[li.Tenant]; !own {
			if li.Weight > 0 {
				n.Weight = li.Weight
			}
			n.Limit = &li
			qs.Tree[li.Tenant] = n
			return
		}
	}
	ts := qs.Tenants[li.Tenant]
	if li.Weight > 0 {
		ts.Weight = li.Weight
	}
	ts.Limit = &li
	qs.Tenants[li.Tenant] = ts
}

// nodeActive is the running tasks of the path tenants below node (0 for a
// name that is no inner node).
func nodeActive(st rdb.QueueStats, node string) int64 {
	var n int64
	for t, ts := range st.Tenants {
		if strings.HasPrefix(t, node+"/") {
			n += ts.Active
		}
	}
	return n
}
