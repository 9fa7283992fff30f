package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantryhq/gantry/taskq"
	"github.com/gantryhq/gantry/taskq/dashboard"
	"github.com/gantryhq/gantry/workspace/auth"
)

type queueUIOptions struct {
	redis, listen, tokenFile string
	tlsCert, tlsKey          string
	insecure                 bool
}

// gantry queue ui: the dashboard.
func newQueueUICmd(env *Env) *cobra.Command {
	var o queueUIOptions
	cmd := &cobra.Command{
		Use:   "ui [--redis ADDR] [--listen 127.0.0.1:7481] [--token-file F]",
		Short: "Serve the live dashboard: queues, tenants, limits, pauses, tasks, dead letters, workflow graphs, cron",
		Long: `Serve the dashboard until SIGINT/SIGTERM. Every API request (all the data
and every change) needs a token; the page itself (its HTML, script and
style, no data) loads without one. The token: with --token-file, the one in
that file; without, a new random one, given once in the URL printed at start
(in the #fragment, which browsers never send). The page trades it for an
HttpOnly cookie. A --listen address that is not
loopback needs --tls-cert/--tls-key, or --insecure-listen when a TLS proxy
is in front.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runQueueUI(cmd, env, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.redis, "redis", "127.0.0.1:6379", redisFlagHelp)
	f.StringVar(&o.listen, "listen", "127.0.0.1:7481", "address to serve on (not loopback: needs TLS or --insecure-listen)")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the token (at least 16 characters; default: a new one per start)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain)")
	f.StringVar(&o.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	f.BoolVar(&o.insecure, "insecure-listen", false, "allow plain HTTP on a non-loopback --listen (a TLS-terminating proxy is in front)")
	return cmd
}

// uiToken reads --token-file, or makes a new token (printed is true: the
// caller shows it once).
func (o *queueUIOptions) token() (tok string, printed bool, err error) {
	if o.tokenFile == "" {
		var b [24]byte
		rand.Read(b[:])
		return base64.RawURLEncoding.EncodeToString(b[:]), true, nil
	}
	b, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return "", false, fmt.Errorf("--token-file: %w", err)
	}
	tok = strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", false, fmt.Errorf("--token-file %s: the token has %d characters, want at least 16", o.tokenFile, len(tok))
	}
	return tok, false, nil
}

func runQueueUI(cmd *cobra.Command, env *Env, o *queueUIOptions) error {
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if err := auth.CheckListen(o.listen, o.tlsCert != "", o.insecure); err != nil {
		return err
	}
	tok, printed, err := o.token()
	if err != nil {
		return err
	}
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: o.redis})
	if err != nil {
		return err
	}
	defer c.Close()
	in, err := taskq.NewInspector(o.redis)
	if err != nil {
		return err
	}
	defer in.Close()
	d := dashboard.New(dashboard.Config{Client: c, Inspector: in, TokenHash: dashboard.HashToken(tok),
		SecureCookie: o.tlsCert != "" || o.insecure, Logger: env.Logger})
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	scheme := "http"
	if o.tlsCert != "" {
		scheme = "https"
	}
	url := scheme + "://" + ln.Addr().String() + "/"
	if printed {
		fmt.Fprintf(cmd.OutOrStdout(), "queue ui on %s — open %s#token=%s (the token is new each start; --token-file keeps one)\n", url, url, tok)
	} else {
		fmt.Fprintf(cmd.OutOrStdout(), "queue ui on %s (log in with the token in %s)\n", url, o.tokenFile)
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		// Requests end with the command: the event streams stop at a signal.
		BaseContext: func(net.Listener) context.Context { return cmd.Context() }}
	defer srv.Close() // an error return also ends the connections still open
	errc := make(chan error, 1)
	go func() {
		if o.tlsCert != "" {
			errc <- srv.ServeTLS(ln, o.tlsCert, o.tlsKey)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-cmd.Context().Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	return nil
}
