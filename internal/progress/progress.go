// Package progress shows how far long work has come: a redrawn bar when the
// output is a terminal, a plain line every few seconds otherwise (logs, CI),
// and a one-line summary at the end.
//
//	p := progress.Start(os.Stderr, "sort", totalBytes, progress.Bytes)
//	... p.Add(n) from any goroutine ...
//	p.Finish() // prints "sort: 1.0 GB in 3.1s (322 MB/s)"
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

// Unit says how the counted quantity is printed.
type Unit int

const (
	Bytes   Unit = iota // printed as kB/MB/GB with a MB/s rate
	Records             // printed as a count with a rate per second
)

// Intervals between updates: a terminal gets a smooth bar, a log file gets a
// line every few seconds so it stays readable.
var (
	TerminalInterval = 200 * time.Millisecond
	LineInterval     = 5 * time.Second
)

// Reporter counts progress toward a total and prints it periodically.
// Add may be called from any goroutine.
type Reporter struct {
	w     io.Writer
	label string
	total int64
	unit  Unit
	tty   bool
	start time.Time
	done  atomic.Int64 // units done so far; updated with Add

	stopOnce sync.Once
	stop     chan struct{}
	exited   chan struct{}
}

// Start begins reporting on w. A nil w, or total <= 0, reports nothing but the
// summary. The caller must call Finish (or Abort).
func Start(w io.Writer, label string, total int64, unit Unit) *Reporter {
	r := &Reporter{w: w, label: label, total: total, unit: unit, start: time.Now(),
		stop: make(chan struct{}), exited: make(chan struct{})}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		r.tty = true
	}
	if w == nil || total <= 0 {
		close(r.exited)
		return r
	}
	go r.loop()
	return r
}

// Add records n more units done.
func (r *Reporter) Add(n int64) { r.done.Add(n) }

// Done returns the units done so far.
func (r *Reporter) Done() int64 { return r.done.Load() }

func (r *Reporter) loop() {
	defer close(r.exited)
	iv := LineInterval
	if r.tty {
		iv = TerminalInterval
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			if r.tty {
				fmt.Fprint(r.w, "\r\033[K")
			}
			return
		case <-t.C:
			r.print()
		}
	}
}

func (r *Reporter) print() {
	d := r.done.Load()
	el := time.Since(r.start)
	pct := 100 * float64(d) / float64(r.total)
	if pct > 100 {
		pct = 100
	}
	rate := r.rate(d, el)
	if r.tty {
		const width = 30
		fill := int(pct / 100 * width)
		bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
		fmt.Fprintf(r.w, "\r\033[K%s [%s] %5.1f%% %s/%s %s", r.label, bar, pct,
			r.amount(d), r.amount(r.total), rate)
		return
	}
	fmt.Fprintf(r.w, "%s: %.1f%% (%s of %s, %s, %s elapsed)\n", r.label, pct,
		r.amount(d), r.amount(r.total), rate, el.Round(100*time.Millisecond))
}

func (r *Reporter) amount(n int64) string {
	if r.unit == Bytes {
		return FormatBytes(n)
	}
	return fmt.Sprintf("%d", n)
}

func (r *Reporter) rate(n int64, el time.Duration) string {
	s := el.Seconds()
	if s <= 0 {
		s = 1e-9
	}
	if r.unit == Bytes {
		return fmt.Sprintf("%.0f MB/s", float64(n)/1e6/s)
	}
	return fmt.Sprintf("%.0f/s", float64(n)/s)
}

func (r *Reporter) halt() {
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.exited
}

// Finish stops the updates and prints a one-line summary with the rate.
// It returns the elapsed time. Safe to call once; later calls only return.
func (r *Reporter) Finish() time.Duration {
	r.halt()
	el := time.Since(r.start)
	if r.w != nil {
		d := r.done.Load()
		fmt.Fprintf(r.w, "%s: %s in %s (%s)\n", r.label, r.amount(d),
			el.Round(time.Millisecond), r.rate(d, el))
	}
	return el
}

// Abort stops the updates without a summary.
func (r *Reporter) Abort() { r.halt() }

// FormatBytes prints n in decimal units (kB, MB, GB), as dd and valsort users expect.
func FormatBytes(n int64) string {
	f := float64(n)
	switch {
	case f >= 1e9:
		return fmt.Sprintf("%.2f GB", f/1e9)
	case f >= 1e6:
		return fmt.Sprintf("%.1f MB", f/1e6)
	case f >= 1e3:
		return fmt.Sprintf("%.1f kB", f/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
