package provider

import "sync"

// IDLocks serialises the calls a provider makes for one workspace id (a
// Start and a Stop must not interleave) while calls for different ids run
// in parallel. An id's lock exists only while someone holds or waits for
// it, so the set does not grow with every workspace ever seen. The zero
// value is ready to use.
type IDLocks struct {
	mu    sync.Mutex
	locks map[string]*idLock
}

type idLock struct {
	sync.Mutex
	refs int // holders and waiters
}

// Lock locks id and returns its unlock.
func (l *IDLocks) Lock(id string) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*idLock{}
	}
	k, ok := l.locks[id]
	if !ok {
		k = &idLock{}
		l.locks[id] = k
	}
	k.refs++
	l.mu.Unlock()
	k.Lock()
	return func() {
		k.Unlock()
		l.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(l.locks, id)
		}
		l.mu.Unlock()
	}
}
