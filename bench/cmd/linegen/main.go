// Command linegen writes text lines to sort: CSV-like records of a name,
// a word, a signed decimal, a hex id and an e-mail address, from a fixed
// seed, so that every run of a benchmark sorts the same bytes.
//
//	cd bench && go run ./cmd/linegen -lines 10000000 > lines.csv
//
// Keys worth sorting by: the whole line; -t , -k 3,3n (the decimal);
// -t , -k 2,2 -k 3,3nr (a word with few values, then the decimal down).
// Lines average about 58 bytes.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
)

func main() {
	n := flag.Int("lines", 1000000, "how many lines")
	seed := flag.Uint64("seed", 1, "the generator's seed")
	flag.Parse()
	r := rand.New(rand.NewPCG(*seed, *seed+1))
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	words := []string{"alpha", "Bravo", "charlie", "delta", "Echo", "foxtrot", "golf", "hotel"}
	for range *n {
		fmt.Fprintf(w, "%s%d,%s,%d.%02d,%08x,user%d@example.com\n",
			words[r.IntN(len(words))], r.IntN(100000), words[r.IntN(len(words))],
			r.IntN(1000000)-500000, r.IntN(100), r.Uint32(), r.IntN(50000))
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "linegen:", err)
		os.Exit(1)
	}
}
