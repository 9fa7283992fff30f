//go:build !unix

package reconcile

import (
	"testing"
	"time"
)

// usage reports nothing where getrusage is missing.
type usage struct{}

func startUsage() usage                        { return usage{} }
func (usage) report(*testing.B, time.Duration) {}
