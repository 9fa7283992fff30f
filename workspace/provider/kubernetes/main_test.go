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
		// A cached transport of a config with certificate files also runs
		// client-go's certificate rotation for the rest of the process
		// (transport's dynamicClientCert, never stopped: its stop channel
		// is a package variable), with its work queue and poller.
		goleak.IgnoreAnyFunction("k8s.io/client-go/transport.(*dynamicClientCert).run"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/transport.(*dynamicClientCert).processNextWorkItem"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"),
		goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.PollImmediateUntil"),
		goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/util/wait.PollImmediateUntilWithContext.poller.func1.1"),
	)
}
