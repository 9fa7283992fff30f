package auth

import "time"

// Principal is who is asking. Admin principals see and act on every
// workspace; others only on those whose owner is Owner.
type Principal struct {
	TokenID string // the public id of the API token (also for page sessions)
	Owner   string
	Admin   bool
}

// MaySee reports whether p may see or act on a workspace owned by owner.
func (p Principal) MaySee(owner string) bool { return p.Admin || p.Owner == owner }

// Token is an API token's row as the store keeps it: never the secret.
type Token struct {
	ID        string
	Owner     string
	Admin     bool
	Hash      string
	CreatedAt time.Time
	LastUsed  time.Time // zero until first use
	ExpiresAt time.Time // zero: never
	RevokedAt time.Time // zero: not revoked
}

// Session is a page login: a cookie secret bound to the token that made it.
// Revoking the token ends its sessions.
type Session struct {
	ID        string
	TokenID   string
	Hash      string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Usable reports why t cannot authenticate at now, or nil.
func (t Token) Usable(now time.Time) error {
	switch {
	case !t.RevokedAt.IsZero():
		return ErrRevoked
	case !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt):
		return ErrExpired
	}
	return nil
}

// Principal is the principal t authenticates as.
func (t Token) Principal() Principal { return Principal{TokenID: t.ID, Owner: t.Owner, Admin: t.Admin} }
