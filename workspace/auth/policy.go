package auth

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Quotas limit what one owner may hold. Zero means no limit.
type Quotas struct {
	Running    int // workspaces RUNNING or on their way there
	Workspaces int // workspaces in any state but deleted
}

// QuotaError is returned when an owner's request would exceed a quota; the
// API answers 429 with its message.
type QuotaError struct {
	Owner string
	What  string // "running workspaces" or "workspaces"
	Limit int
	Count int // how many the owner holds now
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("quota exceeded: owner %q has %d %s, limit %d", e.Owner, e.Count, e.What, e.Limit)
}

// AuditEntry is one row of the audit log: a mutating request, accepted or
// refused.
type AuditEntry struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	TokenID   string    `json:"token_id"`  // empty when the request was not authenticated
	Owner     string    `json:"owner"`     // the principal's owner; empty when unauthenticated
	Action    string    `json:"action"`    // e.g. "workspace.create", "workspace.up", "token.revoke", "session.login"
	Workspace string    `json:"workspace"` // the workspace id (or the id/name asked for, if refused); empty when none
	Status    int       `json:"status"`    // HTTP status answered
	Remote    string    `json:"remote"`    // remote IP
	Detail    string    `json:"detail"`    // why it was refused (an error message; never a secret)
}

// AuditFilter selects audit rows; zero fields match everything.
type AuditFilter struct {
	Workspace string
	Owner     string
	Since     time.Time
	Limit     int // default 1000
}

// ErrInsecureListen is returned by CheckListen for a plain-text listener on
// an address other than loopback.
var ErrInsecureListen = errors.New("refusing to serve plain HTTP on a non-loopback address")

// CheckListen refuses a listen address that is not loopback unless TLS is
// configured or the operator says a TLS-terminating proxy is in front.
func CheckListen(addr string, tls, insecure bool) error {
	if tls || insecure {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w %q: give --tls-cert and --tls-key, or --insecure-listen if a TLS proxy is in front", ErrInsecureListen, addr)
}
