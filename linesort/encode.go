package linesort

import (
	"bytes"
	"encoding/binary"
)

// A line's sort key is the concatenation of its keys' encodings, each
// made so that comparing two encodings as bytes (bytes.Compare) is
// comparing the keys as GNU sort does, and so that no encoding is a
// prefix of another (prefix-free): then the concatenations compare key by
// key, and complementing one key's bytes reverses its order alone (r).
//
//	text     the key's bytes (d, i drop some; f folds a-z to A-Z), 0x00
//	         escaped as 0x00 0xff, then the terminator 0x00 0x00
//	number   zero (any spelling, or no number): 0x20
//	         positive: 0x30, the integer digits' count (4 bytes, big
//	         endian; leading zeros dropped), the integer digits, the
//	         fraction digits (trailing zeros dropped), 0x00
//	         negative: 0x10, then the positive form's bytes after 0x30,
//	         complemented (a larger magnitude sorts first)
const (
	classNegative = 0x10
	classZero     = 0x20
	classPositive = 0x30
)

// AppendKey appends line's sort key to dst. With no -k and no ordering
// option the key is the line itself (Raw), and nothing is appended.
func (o *Order) AppendKey(dst, line []byte) []byte {
	for i := range o.keys {
		k := &o.keys[i]
		b, e := o.begin(line, k), o.end(line, k)
		if e < b {
			e = b
		}
		from := len(dst)
		if k.numeric {
			dst = appendNumber(dst, line[b:e])
		} else {
			dst = appendText(dst, line[b:e], k)
		}
		if k.reverse {
			for j := from; j < len(dst); j++ {
				dst[j] = ^dst[j]
			}
		}
	}
	return dst
}

// Raw reports whether lines are ordered by their bytes alone (no key):
// then a line is its own sort key.
func (o *Order) Raw() bool { return o.raw }

// Compare orders two lines given their sort keys (for a Raw order, pass
// the lines as their keys): by the keys, then, unless Stable, by the whole
// lines' bytes (reversed by the global -r), GNU sort's last resort. 0
// means the lines' order is their input order.
func (o *Order) Compare(keyA, lineA, keyB, lineB []byte) int {
	if o.raw {
		c := bytes.Compare(lineA, lineB)
		if o.reverse {
			return -c
		}
		return c
	}
	if c := bytes.Compare(keyA, keyB); c != 0 || o.stable {
		return c
	}
	c := bytes.Compare(lineA, lineB)
	if o.reverse {
		return -c
	}
	return c
}

// appendText appends the text encoding of s under k's d, f and i.
func appendText(dst, s []byte, k *key) []byte {
	plain := !k.dictionary && !k.printable && !k.fold
	if plain && bytes.IndexByte(s, 0) < 0 {
		dst = append(dst, s...)
		return append(dst, 0, 0)
	}
	for _, c := range s {
		c, ok := k.mapByte(c)
		switch {
		case !ok:
		case c == 0:
			dst = append(dst, 0, 0xff)
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, 0, 0)
}

// mapByte is what c compares as under k's d, f and i; false if it does
// not count.
func (k *key) mapByte(c byte) (byte, bool) {
	switch {
	case k.dictionary && !(isBlank(c) || isAlnum(c)):
		return 0, false
	case k.printable && (c < 0x20 || c > 0x7e):
		return 0, false
	case k.fold && c >= 'a' && c <= 'z':
		return c - ('a' - 'A'), true
	}
	return c, true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// appendNumber appends the numeric encoding of s (parseNumber).
func appendNumber(dst, s []byte) []byte {
	neg, intDigits, frac := parseNumber(s)
	if len(intDigits) == 0 && len(frac) == 0 {
		return append(dst, classZero)
	}
	class := byte(classPositive)
	if neg {
		class = classNegative
	}
	dst = append(dst, class)
	from := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(intDigits)))
	dst = append(dst, intDigits...)
	dst = append(dst, frac...)
	dst = append(dst, 0)
	if neg {
		for j := from; j < len(dst); j++ {
			dst[j] = ^dst[j]
		}
	}
	return dst
}

// parseNumber reads s as GNU sort -n does: blanks, an optional '-',
// digits, optionally '.' and digits; anything after is ignored, and no
// number at all is zero. No thousands separator (the C locale has none).
// It returns the integer digits without leading zeros and the fraction
// digits without trailing zeros.
func parseNumber(s []byte) (neg bool, intDigits, frac []byte) {
	p := 0
	for p < len(s) && isBlank(s[p]) {
		p++
	}
	neg = p < len(s) && s[p] == '-'
	if neg {
		p++
	}
	for p < len(s) && s[p] == '0' {
		p++
	}
	start := p
	p = skipDigits(s, p)
	intDigits = s[start:p]
	if p < len(s) && s[p] == '.' {
		start = p + 1
		p = skipDigits(s, start)
		frac = bytes.TrimRight(s[start:p], "0")
	}
	return neg, intDigits, frac
}

func skipDigits(s []byte, p int) int {
	for p < len(s) && isDigit(s[p]) {
		p++
	}
	return p
}
