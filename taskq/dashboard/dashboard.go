// Package dashboard is taskq's web dashboard (`gantry queue ui`): queues
// and tenants with their backlog, rates, fair shares, limits and pauses;
// the task inspector with cancel/run/delete; the dead letters with
// requeue; a queue's workflows, each one's graph with every node's state,
// and their cancel; the cron entries. One page, embedded (no build step),
// kept live over server-sent events.
//
// Tour: dashboard.go serves the page, the login, the overview and its
// event stream, and the task and queue routes; workflows.go the workflow
// routes (the list with each workflow's state counts, one workflow as
// nodes in a topological order with their depths for the page's layout,
// the cancel); static/ holds the page (index.html, app.js, style.css),
// whose script builds every element with DOM calls (the page's CSP allows
// no inline script or style).
//
// Every API request (/api/…: all the data and every change) needs the
// dashboard's token, as a bearer token or as the cookie the page's login
// sets (HttpOnly, SameSite=Strict); the page itself (its HTML, script and
// style, no data) is served without one. Requests that
// change something must also carry the X-Taskq-UI header, which a page on
// another origin cannot send without a CORS preflight this server never
// grants. The server keeps only the token's SHA-256.
package dashboard

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/taskq"
)

//go:embed static
var static embed.FS

// Config configures a dashboard.
type Config struct {
	Client    *taskq.Client
	Inspector *taskq.Inspector
	// TokenHash is the SHA-256 of the token every request must present.
	TokenHash [32]byte
	// SecureCookie marks the login cookie Secure (served over HTTPS).
	SecureCookie bool
	Logger       *slog.Logger
	// Interval between live updates (default 1 s).
	Interval time.Duration
}

// Dashboard serves the page and its API.
type Dashboard struct {
	cfg Config
	mux *http.ServeMux

	mu   sync.Mutex // guards last and prev
	last *Overview
	prev map[string]int64 // completed counts of the sample before last, by queue and queue\x00tenant
}

const cookieName = "taskq_ui"

// New returns a dashboard.
func New(cfg Config) *Dashboard {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	d := &Dashboard{cfg: cfg, mux: http.NewServeMux()}
	sub, _ := fs.Sub(static, "static")
	d.mux.Handle("GET /", http.FileServerFS(sub))
	d.mux.HandleFunc("POST /api/login", d.login)
	d.mux.HandleFunc("POST /api/logout", d.logout)
	d.mux.Handle("GET /api/overview", d.auth(d.overview))
	d.mux.Handle("GET /api/events", d.auth(d.events))
	d.mux.Handle("GET /api/tasks", d.auth(d.tasks))
	d.mux.Handle("GET /api/task", d.auth(d.task))
	d.mux.Handle("POST /api/task/{op}", d.auth(d.taskOp))
	d.mux.Handle("POST /api/queue/{op}", d.auth(d.queueOp))
	d.mux.Handle("GET /api/workflows", d.auth(d.workflows))
	d.mux.Handle("GET /api/workflow", d.auth(d.workflow))
	d.mux.Handle("POST /api/workflow/cancel", d.auth(d.workflowCancel))
	return d
}

// ServeHTTP serves the page and the API.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	d.mux.ServeHTTP(w, r)
}

// HashToken is what Config.TokenHash holds for token.
func HashToken(token string) [32]byte { return sha256.Sum256([]byte(token)) }

func (d *Dashboard) tokenOK(tok string) bool {
	h := HashToken(tok)
	return tok != "" && subtle.ConstantTimeCompare(h[:], d.cfg.TokenHash[:]) == 1
}

// auth admits a request with the token (bearer or cookie); a request that
// changes something also needs the X-Taskq-UI header (no cross-site form
// or no-cors fetch can send it).
func (d *Dashboard) auth(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if tok == "" {
			if c, err := r.Cookie(cookieName); err == nil {
				tok = c.Value
			}
		}
		if !d.tokenOK(tok) {
			d.refuse(w, r, http.StatusUnauthorized, "no valid token")
			return
		}
		if r.Method != http.MethodGet && r.Header.Get("X-Taskq-UI") != "1" {
			d.refuse(w, r, http.StatusForbidden, "a change without the X-Taskq-UI header (cross-site?)")
			return
		}
		next(w, r)
	})
}

func (d *Dashboard) refuse(w http.ResponseWriter, r *http.Request, code int, why string) {
	d.cfg.Logger.Warn("queue ui: refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "why", why)
	writeJSON(w, code, map[string]string{"error": why})
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Token string `json:"token"`
	}
	if json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body) != nil || !d.tokenOK(body.Token) {
		d.refuse(w, r, http.StatusUnauthorized, "login with a wrong token")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: body.Token, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: d.cfg.SecureCookie, MaxAge: 12 * 3600})
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func (d *Dashboard) logout(w http.ResponseWriter, _ *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (d *Dashboard) fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, taskq.ErrTaskNotFound):
		code = http.StatusNotFound
	case errors.Is(err, errBadRequest), errors.Is(err, taskq.ErrInvalidTask), errors.Is(err, taskq.ErrBadListing):
		code = http.StatusBadRequest
	case errors.Is(err, taskq.ErrTaskState):
		code = http.StatusConflict
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

var errBadRequest = errors.New("bad request")

// Overview is what the page shows at the top, pushed every Interval.
type Overview struct {
	At      time.Time            `json:"at"`
	Queues  []QueueView          `json:"queues"`
	Cron    []taskq.CronInfo     `json:"cron"`
	Workers []taskq.WorkerRecord `json:"workers"`
}

// QueueView is one queue with its rate and its tenants.
type QueueView struct {
	Name string `json:"name"`
	taskq.QueueStats
	Rate    float64      `json:"rate"` // completed per second since the last sample
	Tenants []TenantView `json:"tenant_list"`
}

// TenantView is one tenant with its rate and fair share.
type TenantView struct {
	Name string `json:"name"`
	taskq.TenantStats
	Rate float64 `json:"rate"`
	// Share is the tenant's fair share of the queue's capacity, in percent:
	// its weight over the weights of the tenants with work.
	Share float64 `json:"share"`
}

// snapshot returns the overview, read afresh unless the last one is
// younger than half an interval (every page's stream shares it).
func (d *Dashboard) snapshot(ctx context.Context) (*Overview, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last != nil && time.Since(d.last.At) < d.cfg.Interval/2 {
		return d.last, nil
	}
	st, err := d.cfg.Client.Stats(ctx)
	if err != nil {
		return nil, err
	}
	cron, err := d.cfg.Client.CronList(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	o := &Overview{At: now, Cron: cron, Workers: st.Workers}
	counts := map[string]int64{}
	var dt float64
	if d.last != nil {
		dt = now.Sub(d.last.At).Seconds()
	}
	rate := func(key string, n int64) float64 {
		counts[key] = n
		p, ok := d.prev[key]
		if !ok || dt <= 0 || n < p {
			return 0
		}
		return float64(n-p) / dt
	}
	for name, qs := range st.Queues {
		o.Queues = append(o.Queues, queueView(name, qs, rate))
	}
	sort.Slice(o.Queues, func(i, j int) bool { return o.Queues[i].Name < o.Queues[j].Name })
	d.prev, d.last = counts, o
	return o, nil
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	o, err := d.snapshot(r.Context())
	if err != nil {
		d.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// events streams the overview every Interval as "event: overview".
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	if err := rc.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		d.fail(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(d.cfg.Interval)
	defer tick.Stop()
	for {
		o, err := d.snapshot(r.Context())
		if err != nil {
			fmt.Fprintf(w, "event: error\ndata: %s\n\n", mustJSON(err.Error()))
		} else {
			fmt.Fprintf(w, "event: overview\ndata: %s\n\n", mustJSON(o))
		}
		if rc.Flush() != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func (d *Dashboard) tasks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o := taskq.ListOptions{Tenant: q.Get("tenant"), Cursor: q.Get("cursor"), Limit: 50}
	p, err := d.cfg.Inspector.List(r.Context(), q.Get("queue"), q.Get("state"), o)
	if err != nil {
		d.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (d *Dashboard) task(w http.ResponseWriter, r *http.Request) {
	t, err := d.cfg.Inspector.Get(r.Context(), r.URL.Query().Get("queue"), r.URL.Query().Get("id"))
	if err != nil {
		d.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

type opBody struct {
	Queue  string   `json:"queue"`
	ID     string   `json:"id"`
	IDs    []string `json:"ids"`
	Tenant string   `json:"tenant"`
}

func (d *Dashboard) body(w http.ResponseWriter, r *http.Request) (opBody, bool) {
	var b opBody
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&b); err != nil || b.Queue == "" {
		d.fail(w, fmt.Errorf("%w: want a JSON body with a queue", errBadRequest))
		return b, false
	}
	return b, true
}

// taskOp cancels, runs or deletes one task.
func (d *Dashboard) taskOp(w http.ResponseWriter, r *http.Request) {
	b, ok := d.body(w, r)
	if !ok {
		return
	}
	ctx, in := r.Context(), d.cfg.Inspector
	var t taskq.TaskDetail
	var err error
	switch op := r.PathValue("op"); op {
	case "cancel":
		t, err = in.Cancel(ctx, b.Queue, b.ID, "queue ui "+r.RemoteAddr)
	case "run":
		t, err = in.Run(ctx, b.Queue, b.ID)
	case "delete":
		t, err = in.Delete(ctx, b.Queue, b.ID)
	default:
		err = fmt.Errorf("%w: no task operation %q", errBadRequest, op)
	}
	d.cfg.Logger.Info("queue ui: task "+r.PathValue("op"), "queue", b.Queue, "id", b.ID, "remote", r.RemoteAddr, "err", err)
	if err != nil {
		d.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// queueOp pauses or resumes a queue or tenant, or requeues dead letters.
func (d *Dashboard) queueOp(w http.ResponseWriter, r *http.Request) {
	b, ok := d.body(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	var n int
	var err error
	switch op := r.PathValue("op"); op {
	case "pause":
		err = d.cfg.Inspector.Pause(ctx, b.Queue, b.Tenant, 0)
	case "resume":
		err = d.cfg.Inspector.Resume(ctx, b.Queue, b.Tenant)
	case "requeue-dead":
		n, err = d.cfg.Client.RequeueDead(ctx, b.Queue, b.IDs...)
	default:
		err = fmt.Errorf("%w: no queue operation %q", errBadRequest, op)
	}
	d.cfg.Logger.Info("queue ui: queue "+r.PathValue("op"), "queue", b.Queue, "tenant", b.Tenant, "remote", r.RemoteAddr, "n", n, "err", err)
	if err != nil {
		d.fail(w, err)
		return
	}
	d.changed()
	writeJSON(w, http.StatusOK, map[string]int{"n": n})
}

// queueView is one queue with its tenants' rates and fair shares; rate
// gives a count's rate since the last sample, by key.
func queueView(name string, qs taskq.QueueStats, rate func(key string, n int64) float64) QueueView {
	qv := QueueView{Name: name, QueueStats: qs, Rate: rate(name, qs.Completed)}
	// A paused tenant, or one without work, has no share.
	competing := func(ts taskq.TenantStats) bool { return ts.Pending+ts.Active > 0 && ts.PausedUntil.IsZero() }
	var weights float64
	for _, ts := range qs.Tenants {
		if competing(ts) {
			weights += max(ts.Weight, 0)
		}
	}
	for tn, ts := range qs.Tenants {
		tv := TenantView{Name: tn, TenantStats: ts, Rate: rate(name+"\x00"+tn, ts.Completed)}
		if competing(ts) && weights > 0 {
			tv.Share = 100 * ts.Weight / weights
		}
		qv.Tenants = append(qv.Tenants, tv)
	}
	sort.Slice(qv.Tenants, func(i, j int) bool { return qv.Tenants[i].Name < qv.Tenants[j].Name })
	qv.QueueStats.Tenants = nil // in tenant_list
	return qv
}

// changed drops the last overview after a change, so the next one shows it.
func (d *Dashboard) changed() {
	d.mu.Lock()
	d.last = nil
	d.mu.Unlock()
}
