// Command appbench measures what a user of a workspace waits for, end to
// end, on a real `gantry ws serve` process on loopback (temporary data
// directory, the process provider; as root each workspace gets its own
// uid and network namespace): the workspace's command is appbench itself
// (`appbench upstream`: HTTP and a WebSocket echo on $PORT).
//
// Each run measures, interleaved, with -n samples each:
//
//   - time to first byte of GET / through the app URL (`ws get --json`'s
//     url, the app's gantry_app cookie from the one-time-code login), cold
//     (a new TCP connection per request) and warm (one kept-alive
//     connection); the baselines: the same request through /w/{id}/ with a
//     bearer token, and straight to the app's port inside the workspace's
//     network namespace (as root);
//   - `ssh gantry-NAME true` through the config `ws config-ssh` writes
//     (OpenSSH, ProxyCommand `gantry ws ssh --stdio`), cold (a new ssh and
//     ProxyCommand each time) and warm (OpenSSH connection multiplexing, the
//     master up); the baselines `gantry ws exec ID true`, and a cold ssh
//     whose ProxyCommand is `appbench proxy` (the same upgrade in a small
//     program: what is left without the gantry binary's start);
//   - -streams WebSocket echo streams through the app URL at -rate messages
//     a second each for -duration, then straight to the app's port: sent,
//     received, lost (not back -drain after the last send), latency p50/p99.
//
// It prints every run's figures, then the medians over the runs.
//
//	go run ./cmd/appbench -runs 3
//	go run ./cmd/appbench -runs 1 -only ws -streams 64 -rate 1000 -duration 10s
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

type config struct {
	runs, n, streams, rate int
	duration, drain        time.Duration
	repo, gantry, only     string
	cpuprofile             string
	keep, hold             bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "upstream" {
		runUpstream()
		return
	}
	if len(os.Args) == 4 && os.Args[1] == "proxy" {
		runProxy(os.Args[2], os.Args[3])
		return
	}
	var c config
	flag.IntVar(&c.runs, "runs", 3, "runs (medians over them reported)")
	flag.IntVar(&c.n, "n", 200, "samples of each latency per run")
	flag.IntVar(&c.streams, "streams", 64, "concurrent WebSocket echo streams")
	flag.IntVar(&c.rate, "rate", 1000, "messages a second on each stream")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "how long each stream sends")
	flag.DurationVar(&c.drain, "drain", 30*time.Second, "how long after the last send a message may still come back (later: lost)")
	flag.StringVar(&c.repo, "repo", "..", "the gantry repository to build cmd/gantry from")
	flag.StringVar(&c.gantry, "gantry", "", "a gantry binary to run instead of building one")
	flag.StringVar(&c.only, "only", "http,ssh,ws", "which measurements, comma-separated")
	flag.StringVar(&c.cpuprofile, "cpuprofile", "", "write the server's CPU profile (the whole run) to this file")
	flag.BoolVar(&c.keep, "keep", false, "keep the work directory")
	flag.BoolVar(&c.hold, "hold", false, "measure nothing: set up, print how to reach the workspace, wait for Ctrl-C (for profiling by hand)")
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)

	e, err := setup(c)
	if err != nil {
		log.Fatal(err)
	}
	if c.hold {
		fmt.Printf("export GANTRY_TOKEN=%s\nssh -F %s gantry-%s true\n%s ws --server %s exec %s -- true\ncurl -H 'Cookie: %s' --connect-to ::%s %s/\nCtrl-C ends it.\n",
			e.alice, e.sshConfig, e.name, e.gantry, e.base, e.id, e.cookie, e.addr, e.url)
	}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		e.close()
		os.Exit(130)
	}()
	if c.hold {
		select {}
	}
	code := e.bench()
	e.close()
	os.Exit(code)
}

// bench runs every run and prints the summary; its exit code is 1 when a
// WebSocket message was lost or a request failed.
func (e *env) bench() int {
	c := e.cfg
	var all []*results
	failed := false
	for r := 1; r <= c.runs; r++ {
		fmt.Printf("\n== run %d of %d, load %s\n", r, c.runs, loadavg())
		res := &results{v: map[string]float64{}}
		if strings.Contains(c.only, "http") {
			if err := e.benchHTTP(res); err != nil {
				log.Printf("http: %v", err)
				failed = true
			}
		}
		if strings.Contains(c.only, "ssh") {
			if err := e.benchSSH(res); err != nil {
				log.Printf("ssh: %v", err)
				failed = true
			}
		}
		if strings.Contains(c.only, "ws") {
			if ok, err := e.benchWS(res); err != nil || !ok {
				log.Printf("websocket: %v (no loss: %v)", err, ok)
				failed = true
			}
		}
		all = append(all, res)
	}
	fmt.Printf("\n== medians over %d run(s) (load now %s)\n", c.runs, loadavg())
	printMedians(all)
	if failed {
		return 1
	}
	return 0
}

// loadavg is /proc/loadavg's first three figures.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
