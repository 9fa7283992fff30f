package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gantryhq/gantry/workspace/auth"
)

// Open streams — exec, a followed log, every proxied request (a WebSocket
// or other Upgrade, a long response) — run in the context stream gives
// them: it ends within RecheckEvery of the request's credential ending
// (token revoked or expired, page session logged out: auth.Watch), and, for
// a stream into a workspace, notes TTL activity at its start and then at
// most once per ActivityEvery for as long as it is open, so the idle TTL
// never stops a workspace someone is connected to. (SSE, in package live,
// is watched the same way.)

// stream returns r in its stream's context (see above); id is the
// workspace whose activity it is ("" = none). Call stop when the stream
// ends: from its return on, the stream notes no activity, which the debug
// line "workspace: stream ended" says.
func (a *API) stream(r *http.Request, id string) (_ *http.Request, stop context.CancelFunc) {
	var each func()
	if id != "" {
		ctx := r.Context()
		each = func() { a.noteActivity(ctx, id) }
		each()
	}
	ctx, cancel := auth.Watch(r.Context(), a.cfg.RecheckEvery, each)
	return r.WithContext(ctx), func() {
		cancel()
		if id != "" {
			a.log.Debug("workspace: stream ended", "id", id)
		}
	}
}

// noteActivity touches workspace id for the TTL manager, at most once per
// ActivityEvery.
func (a *API) noteActivity(ctx context.Context, id string) {
	if now := a.clock.Now(); a.touches.due(id, now, a.cfg.ActivityEvery) {
		if err := a.store.Touch(ctx, id, now); err != nil && ctx.Err() == nil {
			a.log.Warn("workspace: activity", "id", id, "err", err)
		}
	}
}

// activity rate-limits the touches of proxied traffic and open streams.
type activity struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due reports whether id's activity should be written at now.
func (t *activity) due(id string, now time.Time, every time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		t.last = map[string]time.Time{}
	}
	if now.Sub(t.last[id]) < every {
		return false
	}
	if len(t.last) > 100_000 {
		clear(t.last)
	}
	t.last[id] = now
	return true
}
