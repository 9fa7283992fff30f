package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
)

// Prefixes make a leaked secret recognisable (secret scanners, logs) and
// tell an API token from a page session.
const (
	TokenPrefix   = "gws_"
	SessionPrefix = "gwsess_"
)

const (
	idBytes  = 10 // 16 base32 characters
	keyBytes = 32 // 256 bits, 43 base64url characters
	idLen    = 16
	keyLen   = 43
)

// ErrMalformed means a presented secret does not have the shape of one this
// package issues. The error never carries the secret.
var ErrMalformed = errors.New("auth: malformed secret")

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewSecret returns a fresh secret with the given prefix, its public id and
// the hash to store. The secret itself is shown to its owner once and never
// kept.
func NewSecret(prefix string) (secret, id, hash string, err error) {
	var raw [idBytes + keyBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", "", "", err
	}
	id = strings.ToLower(idEncoding.EncodeToString(raw[:idBytes]))
	key := base64.RawURLEncoding.EncodeToString(raw[idBytes:])
	secret = prefix + id + "_" + key
	return secret, id, HashSecret(secret), nil
}

// ParseSecret checks the shape of a presented secret with the given prefix
// and returns its public id.
func ParseSecret(prefix, secret string) (id string, err error) {
	rest, ok := strings.CutPrefix(secret, prefix)
	if !ok || len(rest) != idLen+1+keyLen || rest[idLen] != '_' {
		return "", ErrMalformed
	}
	id, key := rest[:idLen], rest[idLen+1:]
	if _, err := idEncoding.DecodeString(strings.ToUpper(id)); err != nil || strings.ToLower(id) != id {
		return "", ErrMalformed
	}
	if _, err := base64.RawURLEncoding.DecodeString(key); err != nil {
		return "", ErrMalformed
	}
	return id, nil
}

// HashSecret is what the store keeps: hex SHA-256 of the whole secret. The
// key has 256 bits of entropy, so a fast hash is enough; no salt is needed.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// MatchSecret reports whether secret hashes to hash, in constant time.
func MatchSecret(secret, hash string) bool {
	got := HashSecret(secret)
	return subtle.ConstantTimeCompare([]byte(got), []byte(hash)) == 1
}
