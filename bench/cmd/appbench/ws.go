package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// clockBase is the zero of the send times messages carry (monotonic).
var clockBase = time.Now()

// stream is one WebSocket echo stream's counts and latencies.
type stream struct {
	sent, received, outOfOrder int64
	lat                        []time.Duration
	sendEnd                    time.Duration // when its last message went, from the start
	err                        error
}

// benchWS runs the WebSocket streams through the app URL, then, as the
// baseline, straight to the app's port inside the workspace's network
// namespace (when the HTTP targets found it). ok: no message lost.
func (e *env) benchWS(res *results) (ok bool, err error) {
	h := http.Header{"Cookie": {e.cookie}, "Origin": {e.url}}
	if ok, err = e.wsRun(res, "ws app URL", "ws"+strings.TrimPrefix(e.url, "http")+"/ws", h, e.dialServer); err != nil || !ok {
		return ok, err
	}
	if e.upstreamPort == "" {
		return true, nil
	}
	direct, err := e.directDial()
	if err != nil {
		return true, nil
	}
	return e.wsRun(res, "ws direct", "ws://127.0.0.1:"+e.upstreamPort+"/ws", http.Header{"Origin": {e.url}}, direct)
}

// wsRun runs -streams WebSocket echo streams to wsURL, each sending -rate
// messages a second (16 bytes: a sequence number and the send time) for
// -duration, paced against the clock (a late sender catches up), then
// waits up to -drain for the echoes (those not back by then are lost).
// ok: every message came back, in order.
func (e *env) wsRun(res *results, name, wsURL string, h http.Header, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (ok bool, err error) {
	c := e.cfg
	d := websocket.Dialer{NetDialContext: dial, HandshakeTimeout: 10 * time.Second}
	conns := make([]*websocket.Conn, c.streams)
	for i := range conns {
		conn, resp, err := d.Dial(wsURL, h)
		if err != nil {
			status := ""
			if resp != nil {
				status = resp.Status
			}
			return false, fmt.Errorf("stream %d: dial %s: %v %s", i, wsURL, err, status)
		}
		defer conn.Close()
		conns[i] = conn
	}
	n := int(c.duration.Seconds() * float64(c.rate))
	interval := time.Second / time.Duration(c.rate)
	fmt.Printf("%s: WebSocket echo, %d streams × %d messages/s for %v (%d messages each):\n", name, c.streams, c.rate, c.duration, n)
	streams := make([]*stream, c.streams)
	var wg sync.WaitGroup
	var pending atomic.Int64
	pending.Store(int64(c.streams * n))
	cpu0 := cpuOf(e.serve.Process.Pid)
	up, _ := pidOf(filepath.Join(e.data, "run", e.id+".pid"))
	up0, self0 := cpuOf(up), cpuOf(os.Getpid())
	start := time.Now().Add(50 * time.Millisecond)
	for i, conn := range conns {
		s := &stream{lat: make([]time.Duration, 0, n)}
		streams[i] = s
		wg.Add(2)
		// Stagger the streams over one interval.
		offset := interval * time.Duration(i) / time.Duration(c.streams)
		go func() { defer wg.Done(); s.send(conn, start.Add(offset), interval, n) }()
		go func() { defer wg.Done(); s.receive(conn, start, n, &pending) }()
	}
	deadline := start.Add(c.duration + c.drain)
	for pending.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cpu := cpuOf(e.serve.Process.Pid) - cpu0
	fmt.Printf("  CPU of the app (upstream echo): %v; of this program (the clients): %v\n", cpuOf(up)-up0, cpuOf(os.Getpid())-self0)
	for _, conn := range conns {
		conn.Close() // ends the receivers still waiting
	}
	wg.Wait()
	return e.wsReport(res, name, streams, n, elapsed, cpu)
}

// send writes n messages, message i at start + i·interval (at once when
// that time has passed).
func (s *stream) send(conn *websocket.Conn, start time.Time, interval time.Duration, n int) {
	msg := make([]byte, 16)
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		binary.LittleEndian.PutUint64(msg, uint64(i))
		binary.LittleEndian.PutUint64(msg[8:], uint64(time.Since(clockBase)))
		if err := conn.WriteMessage(websocket.BinaryMessage, msg); err != nil {
			s.err = fmt.Errorf("write %d: %w", i, err)
			return
		}
		s.sent++
	}
	s.sendEnd = time.Since(start)
}

// receive reads echoes until n came back or the connection closes.
func (s *stream) receive(conn *websocket.Conn, start time.Time, n int, pending *atomic.Int64) {
	next := uint64(0)
	for s.received < int64(n) {
		_, msg, err := conn.ReadMessage()
		now := time.Since(clockBase)
		if err != nil {
			return
		}
		if len(msg) != 16 {
			s.outOfOrder++
			continue
		}
		seq := binary.LittleEndian.Uint64(msg)
		if seq != next {
			s.outOfOrder++
		}
		next = seq + 1
		s.lat = append(s.lat, now-time.Duration(binary.LittleEndian.Uint64(msg[8:])))
		s.received++
		pending.Add(-1)
	}
}

// wsReport prints and records the streams' totals and latencies.
func (e *env) wsReport(res *results, name string, streams []*stream, n int, elapsed, cpu time.Duration) (bool, error) {
	var sent, received, bad int64
	var lat []time.Duration
	var lastSend time.Duration
	var firstErr error
	for _, s := range streams {
		sent += s.sent
		received += s.received
		bad += s.outOfOrder
		lat = append(lat, s.lat...)
		lastSend = max(lastSend, s.sendEnd)
		if s.err != nil && firstErr == nil {
			firstErr = s.err
		}
	}
	want := int64(len(streams) * n)
	lost := sent - received
	fmt.Printf("  sent %d of %d, received %d, lost %d, out of order %d; the last message sent at %v (%.0f messages/s a stream); done after %v\n",
		sent, want, received, lost, bad, lastSend.Round(time.Millisecond), float64(n)/lastSend.Seconds(), elapsed.Round(time.Millisecond))
	res.add(name+" sent", float64(sent))
	res.add(name+" lost", float64(lost))
	res.add(name+" rate a stream msg/s", float64(n)/lastSend.Seconds())
	res.addLatencies(name+" echo", lat)
	fmt.Printf("  server CPU: %v (%v a message echoed)\n", cpu, cpu/time.Duration(max(received, 1)))
	return firstErr == nil && sent == want && lost == 0 && bad == 0, firstErr
}
