package live

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gantryhq/gantry/workspace/auth"
)

// serveEvents streams hub events for one workspace (id != "") or all as
// text/event-stream: "event: state|deleted", "id: seq", "data: json".
// The stream starts with the whole current state, one "state" event per
// workspace the caller may see, however many; then one "synced" event
// ({"seq":N,"count":K}: K workspaces so far) marks its end, and changes
// follow.
// Long streams survive a server WriteTimeout because the handler clears its
// own write deadline through http.ResponseController, and every event is
// flushed at once. A comment line every keepAlive keeps proxies and the
// browser from timing the stream out. The stream ends within RecheckEvery
// of its credential's end (revoked, expired, logged out: auth.Watch).
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request, id string) {
	rc := http.NewResponseController(w)
	if err := rc.SetWriteDeadline(time.Time{}); err != nil && err != http.ErrNotSupported {
		s.writeError(w, r, fmt.Errorf("live: cannot stream: %w", err))
		return
	}
	p, ok := auth.FromContext(r.Context())
	if !ok {
		s.writeError(w, r, auth.ErrNoToken) // the API authenticates first; never serve a stream without
		return
	}
	if id != "" {
		ws, err := s.cfg.Store.Lookup(r.Context(), id, p.Scope())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		id = ws.ID // a stream asked for by name follows the id
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ctx, stop := auth.Watch(r.Context(), s.cfg.RecheckEvery, nil)
	defer stop()
	sub, cancel := s.hub.Subscribe(id, p.MaySee)
	defer cancel()
	if s.sseClients != nil {
		s.sseClients.Inc()
		defer s.sseClients.Dec()
	}
	fmt.Fprintf(w, "retry: 1000\n: connected\n\n")
	if err := rc.Flush(); err != nil {
		return
	}
	if writeInitial(w, sub) != nil || rc.Flush() != nil {
		return
	}
	s.pump(ctx, rc, w, sub)
}

// writeInitial writes sub's initial state and the "synced" event after it;
// the response buffers it, flushing when full.
func writeInitial(w http.ResponseWriter, sub *Sub) error {
	n := 0
	for e := range sub.Initial() {
		if err := writeEvent(w, e); err != nil {
			return err
		}
		n++
	}
	_, err := fmt.Fprintf(w, "event: synced\nid: %d\ndata: {\"seq\":%d,\"count\":%d}\n\n", sub.seq, sub.seq, n)
	return err
}

func writeEvent(w io.Writer, e Event) error {
	_, err := fmt.Fprintf(w, "event: %s\nid: %d\ndata: %s\n\n", e.Type, e.Seq, e.Data())
	return err
}

// pump writes sub's events, and a keep-alive comment every KeepAlive,
// until ctx ends (the client left, or its credential ended) or the hub
// drops the subscriber.
func (s *Server) pump(ctx context.Context, rc *http.ResponseController, w http.ResponseWriter, sub *Sub) {
	ka := time.NewTicker(s.cfg.KeepAlive)
	defer ka.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case e, ok := <-sub.C:
			if !ok {
				return
			}
			err = writeEvent(w, e)
		case <-ka.C:
			_, err = fmt.Fprint(w, ": keep-alive\n\n")
		}
		if err != nil || rc.Flush() != nil {
			return
		}
	}
}
