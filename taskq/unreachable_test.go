package taskq

import (
	"errors"
	"net"
	"testing"
)

// TestUnreachableRedisIsTyped: a port nobody listens on gives
// ErrRedisUnreachable from NewWorker and NewClient (callers wait it out);
// a bad address does not (callers report it).
func TestUnreachableRedisIsTyped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // now nothing listens there
	if _, err := NewWorker(WorkerConfig{Redis: addr}); !errors.Is(err, ErrRedisUnreachable) {
		t.Fatalf("NewWorker on a closed port: %v, want ErrRedisUnreachable", err)
	}
	if _, err := NewClient(ClientConfig{Redis: addr}); !errors.Is(err, ErrRedisUnreachable) {
		t.Fatalf("NewClient on a closed port: %v, want ErrRedisUnreachable", err)
	}
	for _, bad := range []string{"redis://%zz", "redis://127.0.0.1:6379/notadb"} {
		if _, err := NewWorker(WorkerConfig{Redis: bad}); err == nil || errors.Is(err, ErrRedisUnreachable) {
			t.Errorf("NewWorker(%q): %v, want a configuration error", bad, err)
		}
	}
}
