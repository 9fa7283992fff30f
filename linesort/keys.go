package linesort

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrKey is wrapped by every error in a key specification or an option.
var ErrKey = errors.New("linesort: bad key")

// Options are GNU sort's ordering options, spelled as its flags are.
type Options struct {
	// Separator is -t: the one byte that ends a field. Empty means GNU's
	// default: a field is a run of blanks (space, tab) and the non-blanks
	// after it, so each field but the first starts with its blanks.
	Separator string
	// Keys are -k specifications, F1[.C1][OPTS][,F2[.C2][OPTS]] with OPTS
	// from b, d, f, i, n, r, in the order given. None means the whole line.
	Keys []string
	// The global options (-b, -d, -f, -i, -n, -r): they order the whole
	// line when there is no key, and apply to every key that has no
	// ordering option of its own. Reverse also reverses the last-resort
	// comparison.
	IgnoreBlanks, Dictionary, Fold, Printable, Numeric, Reverse bool
	// Stable is -s: lines whose keys compare equal keep their input order
	// instead of being ordered by their whole bytes.
	Stable bool
}

// ParseArgs reads GNU sort's ordering arguments, each flag with its value
// in one element (-k2,2n, -t, -b -d -f -i -n -r -s),
// into Options; it does not check the keys (NewOrder does).
func ParseArgs(args []string) (Options, error) {
	var o Options
	flags := map[string]*bool{"-b": &o.IgnoreBlanks, "-d": &o.Dictionary, "-f": &o.Fold, "-i": &o.Printable,
		"-n": &o.Numeric, "-r": &o.Reverse, "-s": &o.Stable}
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "-k"):
			o.Keys = append(o.Keys, a[2:])
		case strings.HasPrefix(a, "-t"):
			o.Separator = a[2:]
		case flags[a] != nil:
			*flags[a] = true
		default:
			return o, fmt.Errorf("%w: %q is not an ordering option linesort has", ErrKey, a)
		}
	}
	return o, nil
}

// String spells o as GNU sort's arguments (the separator quoted as Go
// quotes it), global options first: two Options order lines alike when
// their strings are equal.
func (o Options) String() string {
	var a []string
	for _, g := range []struct {
		on   bool
		flag string
	}{{o.IgnoreBlanks, "-b"}, {o.Dictionary, "-d"}, {o.Fold, "-f"}, {o.Printable, "-i"}, {o.Numeric, "-n"}, {o.Reverse, "-r"}, {o.Stable, "-s"}} {
		if g.on {
			a = append(a, g.flag)
		}
	}
	if o.Separator != "" {
		a = append(a, "-t", strconv.Quote(o.Separator))
	}
	for _, k := range o.Keys {
		a = append(a, "-k", k)
	}
	return strings.Join(a, " ")
}

// key is one parsed -k: fields and characters counted from 0; eword -1
// means "to the end of the line" (no F2), echar 0 "to the end of field
// eword".
type key struct {
	sword, schar int
	eword, echar int
	skipStart    bool // b in F1's options: skip blanks before counting schar
	skipEnd      bool // b in F2's options: skip blanks before counting echar
	dictionary   bool // d: only blanks and alphanumerics count
	fold         bool // f: a-z compare as A-Z
	printable    bool // i: only printable ASCII counts
	numeric      bool // n: a leading -?digits[.digits] compared by value
	reverse      bool // r
}

// hasOrdering reports whether k carries an option of its own (GNU's
// default_key_compare is its negation, with r counted apart).
func (k key) hasOrdering() bool {
	return k.skipStart || k.skipEnd || k.dictionary || k.fold || k.printable || k.numeric
}

// inherit gives k the global options, as GNU sort does for a key with none.
func (k *key) inherit(g key) {
	k.skipStart, k.skipEnd = g.skipStart, g.skipEnd
	k.dictionary, k.fold, k.printable, k.numeric, k.reverse = g.dictionary, g.fold, g.printable, g.numeric, g.reverse
}

// Order is a parsed set of Options: it turns a line into its sort key
// (AppendKey) and compares two lines by their keys (Compare).
type Order struct {
	keys    []key
	sep     int  // the -t byte, or -1 for blank-separated fields
	raw     bool // no key: a line's key is the line itself
	reverse bool // the global -r, for the last-resort comparison
	stable  bool
}

// NewOrder checks o and returns its Order.
func NewOrder(o Options) (*Order, error) {
	ord := &Order{sep: -1, reverse: o.Reverse, stable: o.Stable}
	switch len(o.Separator) {
	case 0:
	case 1:
		ord.sep = int(o.Separator[0])
	default:
		if o.Separator != `\0` {
			return nil, fmt.Errorf("%w: the field separator %q is more than one byte", ErrKey, o.Separator)
		}
		ord.sep = 0
	}
	global := key{eword: -1, skipStart: o.IgnoreBlanks, skipEnd: o.IgnoreBlanks, dictionary: o.Dictionary,
		fold: o.Fold, printable: o.Printable, numeric: o.Numeric, reverse: o.Reverse}
	if global.dictionary {
		global.printable = false // d wins over i, as in GNU sort
	}
	for _, spec := range o.Keys {
		k, err := parseKey(spec)
		if err != nil {
			return nil, err
		}
		if !k.hasOrdering() && !k.reverse {
			k.inherit(global)
		}
		if err := checkCombination(k, "-k "+spec); err != nil {
			return nil, err
		}
		ord.keys = append(ord.keys, k)
	}
	if len(ord.keys) == 0 {
		if global.hasOrdering() {
			if err := checkCombination(global, "the global options"); err != nil {
				return nil, err
			}
			ord.keys = []key{global}
		} else {
			ord.raw = true // -r alone reverses the last resort only
		}
	}
	return ord, nil
}

// checkCombination refuses what GNU sort refuses: a key (after it took
// the global options, if it did) that is both numeric and d or i. The
// global options alone are checked only where they order the whole line.
func checkCombination(k key, what string) error {
	if !k.numeric || !k.dictionary && !k.printable {
		return nil
	}
	other := "i"
	if k.dictionary {
		other = "d"
	}
	return fmt.Errorf("%w: %s: options n and %s are incompatible", ErrKey, what, other)
}

// parseKey parses one -k specification.
func parseKey(spec string) (key, error) {
	k := key{eword: -1}
	bad := func(why string) (key, error) {
		return key{}, fmt.Errorf("%w: -k %q: %s", ErrKey, spec, why)
	}
	f, s, err := fieldCount(spec)
	if err != nil {
		return bad("invalid number at field start")
	}
	if f == 0 {
		return bad("field number is zero")
	}
	k.sword = f - 1
	if strings.HasPrefix(s, ".") {
		c, rest, err := fieldCount(s[1:])
		if err != nil {
			return bad("invalid number after '.'")
		}
		if c == 0 {
			return bad("character offset is zero")
		}
		k.schar, s = c-1, rest
	}
	if s, err = k.options(s, true); err != nil {
		return bad(err.Error())
	}
	if strings.HasPrefix(s, ",") {
		f, rest, err := fieldCount(s[1:])
		if err != nil {
			return bad("invalid number after ','")
		}
		if f == 0 {
			return bad("field number is zero")
		}
		k.eword, s = f-1, rest
		if strings.HasPrefix(s, ".") {
			c, rest, err := fieldCount(s[1:])
			if err != nil {
				return bad("invalid number after '.'")
			}
			k.echar, s = c, rest
		}
		if s, err = k.options(s, false); err != nil {
			return bad(err.Error())
		}
	}
	if s != "" {
		return bad("stray character in field spec")
	}
	return k, nil
}

// fieldCount reads the decimal number s starts with, after blanks and a
// '+' (as GNU's strtoumax takes them); a huge one saturates: a field or
// character past every line's end.
func fieldCount(s string) (int, string, error) {
	s = strings.TrimLeft(s, " \t")
	s = strings.TrimPrefix(s, "+")
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n == 0 {
		return 0, s, errors.New("no number")
	}
	v, err := strconv.ParseInt(s[:n], 10, 64)
	if err != nil || v > 1<<40 {
		v = 1 << 40 // longer than any line (a chunk is at most 2 GiB), and no overflow when added to
	}
	return int(v), s[n:], nil
}

// options reads the option letters s starts with into k; start says
// whether they follow F1 (b skips blanks at the start) or F2 (at the end).
func (k *key) options(s string, start bool) (string, error) {
	for s != "" {
		switch s[0] {
		case 'b':
			if start {
				k.skipStart = true
			} else {
				k.skipEnd = true
			}
		case 'd':
			k.dictionary, k.printable = true, false // d wins over i
		case 'f':
			k.fold = true
		case 'i':
			k.printable = !k.dictionary
		case 'n':
			k.numeric = true
		case 'r':
			k.reverse = true
		case 'g', 'h', 'M', 'R', 'V':
			return s, fmt.Errorf("option %q is not supported (gantry orders by b, d, f, i, n, r)", s[0])
		default:
			return s, nil
		}
		s = s[1:]
	}
	return s, nil
}

// isBlank is GNU sort's blank in the C locale.
func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// begin is where k's text starts in line (GNU's begfield).
func (o *Order) begin(line []byte, k *key) int {
	p, lim := 0, len(line)
	for w := k.sword; p < lim && w > 0; w-- {
		p = o.skipField(line, p)
		if o.sep >= 0 && p < lim {
			p++ // past the separator
		}
	}
	if k.skipStart {
		for p < lim && isBlank(line[p]) {
			p++
		}
	}
	return min(lim, p+k.schar)
}

// end is where k's text ends in line (GNU's limfield).
func (o *Order) end(line []byte, k *key) int {
	lim := len(line)
	if k.eword < 0 {
		return lim
	}
	p, w := 0, k.eword
	if k.echar == 0 {
		w++ // the whole of field eword
	}
	for ; p < lim && w > 0; w-- {
		p = o.skipField(line, p)
		if o.sep >= 0 && p < lim && (w > 1 || k.echar != 0) {
			p++
		}
	}
	if k.echar != 0 {
		if k.skipEnd {
			for p < lim && isBlank(line[p]) {
				p++
			}
		}
		p = min(lim, p+k.echar)
	}
	return p
}

// skipField moves p from the start of a field to its end: to the next
// separator, or past the blanks and then the non-blanks of a
// blank-separated field.
func (o *Order) skipField(line []byte, p int) int {
	if o.sep >= 0 {
		for p < len(line) && int(line[p]) != o.sep {
			p++
		}
		return p
	}
	for p < len(line) && isBlank(line[p]) {
		p++
	}
	for p < len(line) && !isBlank(line[p]) {
		p++
	}
	return p
}
