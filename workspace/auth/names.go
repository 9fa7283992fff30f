package auth

import (
	"errors"
	"fmt"
)

// MaxOwnerLen bounds an owner name.
const MaxOwnerLen = 64

// ErrBadOwner is wrapped by ValidOwner's errors.
var ErrBadOwner = errors.New("auth: bad owner name")

// ValidOwner checks an owner name: 1–64 characters of a–z, 0–9, '.', '_' and
// '-', starting with a letter or digit. Names appear in URLs and logs, so
// nothing else is accepted.
func ValidOwner(name string) error {
	if name == "" || len(name) > MaxOwnerLen {
		return fmt.Errorf("%w: %q must be 1 to %d characters", ErrBadOwner, name, MaxOwnerLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("%w: %q: use a-z, 0-9, '.', '_' and '-', starting with a letter or digit", ErrBadOwner, name)
		}
	}
	return nil
}
