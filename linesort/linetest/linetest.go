// Package linetest makes lines for tests of line sorting (packages
// linesort and dsort) and runs GNU sort, the reference they are checked
// against.
package linetest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Cases are the orderings compared with GNU sort, as its arguments.
var Cases = [][]string{
	{"-n", "-f"},                   // f with n: accepted, no effect
	{"-d", "-i", "-k2,2id"},        // d wins over i
	{"-n", "-d", "-k1,1r", "-k2b"}, // keys with options of their own take neither n nor d
	{},
	{"-r"},
	{"-n"},
	{"-n", "-r", "-s"},
	{"-k2,2"},
	{"-k2"},
	{"-k2,2n", "-k1,1"},
	{"-t,", "-k3,3nr", "-k1,1"},
	{"-k1.3,1.5"},
	{"-k2b,2", "-k3.2b,3.4"},
	{"-t:", "-k2,2", "-s"},
	{"-f", "-k1,1"},
	{"-k3,3d", "-k2,2i"},
	{"-t,", "-k2.2,3.1r"},
	{"-k5,5n"},
	{"-b", "-k2,3"},
	{"-k2,2fr", "-k1,1n"},
	{"-t\t", "-k2,2n", "-k4"},
	{"-s", "-k1,1"},
	{"-d", "-f"},
	{"-k1,1", "-r"},
	{"-t,", "-k4.3n"},
	{"-k2.3b,2.2b"}, // a key that ends before it starts
	{"-i", "-r", "-k3"},
}

// GNUSort is `LC_ALL=C sort args paths…`'s output.
func GNUSort(t testing.TB, gnu string, args, paths []string) []byte {
	t.Helper()
	cmd := exec.Command(gnu, append(slices.Clone(args), paths...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sort %q: %v: %s", args, err, stderr.String())
	}
	return out
}

// Generated makes n lines of a few blank-, comma-, colon- or
// tab-separated fields: numbers of every shape, words of both cases,
// punctuation, runs of blanks, empty fields.
func Generated(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed*7+1))
	var b bytes.Buffer
	for range n {
		fields := 1 + r.IntN(6)
		for f := range fields {
			if f > 0 {
				b.WriteString([]string{" ", "  ", "\t", ",", ":", " , ", "\t\t"}[r.IntN(7)])
			}
			b.WriteString(field(r))
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func field(r *rand.Rand) string {
	switch r.IntN(9) {
	case 0:
		return fmt.Sprint(r.IntN(2000) - 1000)
	case 1:
		return fmt.Sprintf("%.*f", r.IntN(4), (r.Float64()-0.5)*1e4)
	case 2:
		return fmt.Sprintf("%0*d", 1+r.IntN(6), r.IntN(500))
	case 3:
		return []string{"-0", "0", "0.000", "-", ".", "-.5", ".5", "+3", "1e3", "  42", "-0.0", "007.10", "1,234"}[r.IntN(13)]
	case 4:
		return ""
	case 5:
		return strings.Repeat("z", r.IntN(3)) + []string{"Apple", "apple", "APPLE", "banana", "Banana", "bAnana", "_x", "a-b", "a.b", "Ab!c"}[r.IntN(10)]
	default:
		w := make([]byte, 1+r.IntN(8))
		for i := range w {
			w[i] = "abcXYZ019 .-_!~"[r.IntN(15)]
		}
		return string(w)
	}
}

// Duplicates makes n lines drawn from a few dozen, so most keys repeat and
// equal keys are ordered by -s or the last resort.
func Duplicates(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	pool := bytes.Split(Generated(seed+100, 40), []byte("\n"))
	pool = pool[:len(pool)-1]
	var b bytes.Buffer
	for i := range n {
		b.Write(pool[r.IntN(len(pool))])
		if r.IntN(3) == 0 {
			fmt.Fprintf(&b, " #%d", i%7)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Adversarial is files with what trips line sorters: empty lines and an
// empty file, no final newline (twice, so two last lines meet), a line
// nearly as long as the test's smallest chunk, CRLF, NUL and high bytes,
// lines of blanks, lines with fewer fields than the keys ask for, lines
// that differ only in case or leading zeros, many times over.
func Adversarial() [][]byte {
	long := bytes.Repeat([]byte("long line 9 "), 250) // 3,000 bytes
	return [][]byte{
		[]byte("b 2\n\n\na 1\n \n\t\nc,3,x\r\nc,3,x\nc,3\r\n"),
		{},
		[]byte("no final newline 5"),
		[]byte("z\x00y 1\n\x00\nz\xffy -1\n\xe9t\xe9 3\n\xc3\xa9 2\n"),
		append(append([]byte("x 10\n"), long...), []byte("\n-5 -5\n  -5 a\n0 0\n,,,\n::\n1.5\n1.50\n01.5\nend without newline")...),
		[]byte("a:b:c:d:e\n:::\na\nA\n1\n-1\n1e2\n +1\n"),
		bytes.Repeat([]byte("dup 1\ndup 01\nDup 1\ndup 1\t\n"), 100),
	}
}

// RandomArgs draws GNU sort arguments of the options linesort has.
func RandomArgs(r *rand.Rand) []string {
	var a []string
	for _, g := range []string{"-b", "-d", "-f", "-i", "-n", "-r", "-s"} {
		if r.IntN(5) == 0 {
			a = append(a, g)
		}
	}
	if r.IntN(2) == 0 {
		a = append(a, "-t"+[]string{" ", "\t", ",", "-", ".", "0", "a", `\0`, "\xff"}[r.IntN(9)])
	}
	opts := func() string {
		var s []byte
		for range r.IntN(3) {
			s = append(s, "bdfinr"[r.IntN(6)])
		}
		return string(s)
	}
	for range r.IntN(3) {
		k := fmt.Sprint(1 + r.IntN(4))
		if r.IntN(2) == 0 {
			k += fmt.Sprint(".", 1+r.IntN(4))
		}
		k += opts()
		if r.IntN(3) > 0 {
			k += fmt.Sprint(",", 1+r.IntN(4))
			if r.IntN(2) == 0 {
				k += fmt.Sprint(".", r.IntN(5))
			}
			k += opts()
		}
		a = append(a, "-k"+k)
	}
	r.Shuffle(len(a), func(i, j int) { a[i], a[j] = a[j], a[i] })
	return a
}

// RandomLines is up to 30 lines of up to 8 bytes, the last newline
// dropped one time in three.
func RandomLines(r *rand.Rand) []byte {
	const alphabet = " \t,-.0123456789aA\x00\xff"
	var b []byte
	for range r.IntN(30) {
		for range r.IntN(9) {
			b = append(b, alphabet[r.IntN(len(alphabet))])
		}
		b = append(b, '\n')
	}
	if len(b) > 0 && r.IntN(3) == 0 {
		b = b[:len(b)-1]
	}
	return b
}
