// Package auth holds the workspace service's accounts vocabulary: secrets,
// principals, the authenticator that turns a request into a principal, and the
// limiter that slows down repeated failures. It speaks no SQL: the store that
// keeps tokens and sessions implements [Store].
//
// Tour:
//
//   - secret.go: API tokens and session ids. A secret is
//     "<prefix><id>_<key>" — a recognisable prefix ("gws_" for API tokens,
//     "gwsess_" for page sessions), a public 16-character id that names the row
//     and 256 random bits of key. Only the SHA-256 of the whole secret is stored;
//     [MatchSecret] compares in constant time.
//   - principal.go: [Principal] (who is asking: token id, owner, admin) and the
//     rows the store returns, [Token] and [Session].
//   - names.go: owner-name validation ([ValidOwner]).
//   - authenticator.go: [Authenticator.Authenticate] reads the bearer token or
//     the session cookie, checks hash, expiry and revocation, and records last
//     use at most once a minute per token. While an address is throttled it
//     refuses before any store read, unless the credential is one it has
//     accepted before.
//   - limiter.go: [Limiter], a token bucket per remote address that throttles
//     failed authentications (429 with Retry-After).
//   - policy.go: [Quotas] and [QuotaError] (429), [AuditEntry] and
//     [AuditFilter], and [CheckListen], which refuses plain HTTP on an
//     address other than loopback.
//   - watch.go: [Watch], how an open stream ends within seconds of its
//     credential's end (revoked, expired, logged out), [DefaultRecheckEvery],
//     and [Authenticator.Reauthenticate], the re-check outside the limiter.
//
// Invariant: no function in this package logs or returns a secret in an error;
// errors name the token id at most.
package auth
