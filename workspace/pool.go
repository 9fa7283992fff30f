package workspace

import (
	"encoding/json"
	"fmt"
	"strings"
)

// A warm pool keeps Size workspaces of a template's latest version
// provisioned and RUNNING ahead of any create, owned by no one: a create
// from the template that asks for RUNNING with the template's defaults
// claims one (a compare-and-set on the row, so no member is ever handed out
// twice) instead of waiting for a provider start (parameters that change
// only the env: a restart of its command in place). The leader refills the
// pool in the background, drains the members of an older version after a
// template update, and replaces a member that failed.
//
// An unclaimed member's owner is PoolOwner(its id): an owner of its own,
// which no token can have (owners are lowercase names, auth.ValidOwner),
// so a member shares nothing with anyone (on Docker: a network of its own)
// and counts in no one's quota. A claim gives it its claimer's owner, name,
// parameters and desired state in one write, under the claimer's quotas.

// PoolOwnerPrefix starts the owner of an unclaimed pool member.
const PoolOwnerPrefix = "@pool-"

// PoolOwner is the owner of the unclaimed pool member id.
func PoolOwner(id string) string { return PoolOwnerPrefix + id }

// IsPoolOwner says whether owner is an unclaimed pool member's.
func IsPoolOwner(owner string) bool { return strings.HasPrefix(owner, PoolOwnerPrefix) }

// MaxPoolSize bounds one template's pool.
const MaxPoolSize = 1000

// PoolStatus is a template's pool: its configured Size, and its members
// now — Ready (RUNNING at the template's latest version, claimable),
// Starting (on their way there) and Draining (of an older version, failed
// or surplus, being deleted).
type PoolStatus struct {
	Template string `json:"template"`
	Size     int    `json:"size"`
	Version  int    `json:"version,omitempty"` // the version its members are made from
	Ready    int    `json:"ready"`
	Starting int    `json:"starting"`
	Draining int    `json:"draining"`
}

// PoolReady says whether t can have a warm pool: every parameter needs a
// default, since members are made before anyone gives a value.
func (t Template) PoolReady() error {
	for _, p := range t.Params {
		if p.Default == nil {
			return fmt.Errorf("%w: template %s: a warm pool needs a default for every parameter, and %s has none", ErrBadInput, t.Name, p.Name)
		}
	}
	return nil
}

// PoolMember is the workspace a pool of t adds: t with its defaults,
// RUNNING, under its own owner and named after the template.
func (t Template) PoolMember(id string) (NewWorkspace, error) {
	n, err := t.Instantiate(t.Name, nil)
	if err != nil {
		return n, err
	}
	n.ID, n.Owner, n.Desired = id, PoolOwner(id), Running
	return n, nil
}

// Claims says whether n, made from t, can be served by one of t's pool
// members (ok): made with t's version and asking RUNNING, with the image
// and command the defaults give. When n's parameters change only its env,
// the member serves it by restarting its command in place with n's env
// (restart; Workspace.RestartPending): the volume, the uid and the
// network stay, and no provisioning is waited for. Parameters that change
// the image, the command or anything else of the spec make a different
// workspace: it starts cold.
func (t Template) Claims(n NewWorkspace) (ok, restart bool) {
	if n.Desired != Running || n.Spec.Template == nil || n.Spec.Template.Version != t.Version || n.ArchiveKey != "" {
		return false, false
	}
	m, err := t.Instantiate(n.Name, nil)
	if err != nil || n.Image != m.Image || n.Command != m.Command {
		return false, false
	}
	if specKey(n.Spec) == specKey(m.Spec) {
		return true, false
	}
	n.Spec.Env, m.Spec.Env = nil, nil
	if specKey(n.Spec) != specKey(m.Spec) {
		return false, false
	}
	return true, true
}

// PoolClaim is how a claim takes a pool member: Adopt, its provider hands
// it to its new owner after the claim (provider.Adopter: Docker moves it to
// the owner's network); Restart, its command is restarted in place with
// the claim's spec (Claims' restart).
type PoolClaim struct {
	Adopt, Restart bool
}

// specKey is s without its template reference, as comparable text.
func specKey(s Spec) string {
	s.Template = nil
	b, _ := json.Marshal(s)
	return string(b)
}
