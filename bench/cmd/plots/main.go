// Command plots draws docs/BENCHMARKS.md's charts (SVG, with gonum/plot)
// from the recorded results in docs/results/*.csv: `make plots`.
//
//	cd bench && go run ./cmd/plots -results ../docs/results -out ../docs/plots
//
// A results file is a CSV whose first column is the x axis (numbers: a
// line chart, one line per series, each point drawn; words: a bar chart),
// then one column per series, then date and commit (of the row's run).
// Lines starting with '#' before the header are "key: value" metadata:
// title, command, machine, x and y (the axes' names), and, for a bar
// chart, relative-to (a series the others are divided by, e.g. goroutines
// = 1) with unit (a column naming each row's unit, left out of the series).
// Each chart names its command, the dates of its rows and the machine.
package main

import (
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

func main() {
	results := flag.String("results", "../docs/results", "directory of the recorded results (*.csv)")
	out := flag.String("out", "../docs/plots", "directory to write the charts into (*.svg)")
	flag.Parse()
	if err := run(*results, *out); err != nil {
		fmt.Fprintln(os.Stderr, "plots:", err)
		os.Exit(1)
	}
}

// run draws a chart in out for each results file in results.
func run(results, out string) error {
	files, err := filepath.Glob(filepath.Join(results, "*.csv"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no *.csv in %s", results)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		t, err := readTable(f)
		if err != nil {
			return err
		}
		dst := filepath.Join(out, strings.TrimSuffix(filepath.Base(f), ".csv")+".svg")
		if err := draw(t, dst); err != nil {
			return err
		}
		fmt.Println("plots: wrote", dst)
	}
	return nil
}

// table is one results file.
type table struct {
	name   string
	meta   map[string]string
	series []string    // the series' names (the columns after x, before date)
	xs     []string    // each row's x
	ys     [][]float64 // ys[row][series]
	dates  []string
}

// readTable reads and checks a results file.
func readTable(path string) (*table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t := &table{name: filepath.Base(path), meta: map[string]string{}}
	lines := strings.Split(string(b), "\n")
	i := 0
	for ; i < len(lines) && strings.HasPrefix(lines[i], "#"); i++ {
		k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(lines[i], "#")), ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want \"# key: value\"", path, i+1)
		}
		t.meta[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	rows, err := csv.NewReader(strings.NewReader(strings.Join(lines[i:], "\n"))).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := t.fill(rows); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, k := range []string{"title", "command", "machine", "x", "y"} {
		if t.meta[k] == "" {
			return nil, fmt.Errorf("%s: no \"# %s:\" line", path, k)
		}
	}
	return t, nil
}

// fill reads the header and rows: x, the series, date, commit (and the
// unit column, which is not a series).
func (t *table) fill(rows [][]string) error {
	if len(rows) < 2 {
		return errors.New("want a header and at least one row")
	}
	head := rows[0]
	n := len(head)
	if n < 4 || head[n-2] != "date" || head[n-1] != "commit" {
		return fmt.Errorf("header %q: want x, series…, date, commit", head)
	}
	cols := []int{}
	for c := 1; c < n-2; c++ {
		if head[c] != "unit" {
			t.series = append(t.series, head[c])
			cols = append(cols, c)
		}
	}
	for r, row := range rows[1:] {
		if len(row) != n {
			return fmt.Errorf("row %d has %d fields, the header %d", r+1, len(row), n)
		}
		ys := make([]float64, len(cols))
		for j, c := range cols {
			v, err := strconv.ParseFloat(row[c], 64)
			if err != nil {
				return fmt.Errorf("row %d, %s: %w", r+1, head[c], err)
			}
			ys[j] = v
		}
		t.xs, t.ys, t.dates = append(t.xs, row[0]), append(t.ys, ys), append(t.dates, row[n-2])
	}
	return nil
}

// numericX reports whether every x is a number (a line chart).
func (t *table) numericX() bool {
	for _, x := range t.xs {
		if _, err := strconv.ParseFloat(x, 64); err != nil {
			return false
		}
	}
	return true
}

// caption is the line under a chart: its command, its rows' dates and the
// machine.
func (t *table) caption() string {
	d := slices.Clone(t.dates)
	slices.Sort(d)
	d = slices.Compact(d)
	when := d[0]
	if len(d) > 1 {
		when = d[0] + " – " + d[len(d)-1]
	}
	return fmt.Sprintf("%s\n%s · %s", t.meta["command"], when, t.meta["machine"])
}
