package kubernetes

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// client-go caches one transport per TLS configuration for the whole
		// process (k8s.io/client-go/transport's tlsCache), shared by every
		// client made from an equal rest.Config; its HTTP/2 connection to the
		// API server stays open for the next client, by design.
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
	)
}
