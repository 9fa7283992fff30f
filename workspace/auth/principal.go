package auth

import (
	"context"
	"time"
)

// Principal is who is asking. Admin principals see and act on every
// workspace; others only on those whose owner is Owner.
type Principal struct {
	TokenID string // the public id of the API token (also for page sessions)
	Owner   string
	Admin   bool
	// SessionID is set when the request came with a page session cookie
	// rather than a bearer token.
	SessionID string
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

type principalKey struct{}

// WithPrincipal returns ctx carrying p (the API sets it once a request is
// authenticated).
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext is the principal WithPrincipal stored; ok is false for an
// unauthenticated request.
func FromContext(ctx context.Context) (p Principal, ok bool) {
	p, ok = ctx.Value(principalKey{}).(Principal)
	return p, ok
}

type recheckKey struct{}

// WithRecheck returns ctx carrying f, which authenticates the request again.
func WithRecheck(ctx context.Context, f func() error) context.Context {
	return context.WithValue(ctx, recheckKey{}, f)
}

// Recheck authenticates ctx's request again (nil when it still holds, or
// when ctx carries no check).
func Recheck(ctx context.Context) error {
	if f, ok := ctx.Value(recheckKey{}).(func() error); ok {
		return f()
	}
	return nil
}

// Scope is the owner filter for p's reads: "" (every owner) for an admin,
// else p's own owner.
func (p Principal) Scope() string {
	if p.Admin {
		return ""
	}
	return p.Owner
}

// NewToken makes a token row and its secret: the secret is shown once,
// only its hash is stored.
func NewToken(owner string, admin bool, now time.Time, expiresIn time.Duration) (Token, string, error) {
	if err := ValidOwner(owner); err != nil {
		return Token{}, "", err
	}
	secret, id, hash, err := NewSecret(TokenPrefix)
	if err != nil {
		return Token{}, "", err
	}
	t := Token{ID: id, Owner: owner, Admin: admin, Hash: hash, CreatedAt: now.UTC().Truncate(time.Millisecond)}
	if expiresIn > 0 {
		t.ExpiresAt = t.CreatedAt.Add(expiresIn)
	}
	return t, secret, nil
}
