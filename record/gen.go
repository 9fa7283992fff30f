package record

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// GenOptions selects the record form, as gensort's flags do. The zero value
// is gensort's default: binary records, uniform keys.
type GenOptions struct {
	ASCII bool // -a: printable records (10-char key, record number, filler, CRLF)
	Skew  bool // -s: skewed keys
}

// String names the options as gensort flags ("", "-a", "-s", "-a -s").
func (o GenOptions) String() string {
	switch {
	case o.ASCII && o.Skew:
		return "-a -s"
	case o.ASCII:
		return "-a"
	case o.Skew:
		return "-s"
	}
	return ""
}

// window is how many consecutive LCG outputs one binary record uses.
const window = 10

// slotXor holds, per 10-byte slot after the key, the constant XORed into the
// top 10 bytes of that slot's random number (gensort 1.5 gen_rec). Only the
// top 16 bits of the low word's constant matter.
var slotXor = [window]struct {
	hi uint64
	lo uint16
}{
	{0, 0},
	{0xF0E8E4E2E1D8D4D2, 0xD1CC},
	{0xCAC9C6C5C3B8B4B2, 0xB1AC},
	{0xAAA9A6A5A39C9A99, 0x9695},
	{0x938E8D8B87787472, 0x716C},
	{0x6A696665635C5A59, 0x5655},
	{0x534E4D4B473C3A39, 0x3635},
	{0x332E2D2B271E1D1B, 0x170F},
	{0xC8C4C2C198949291, 0x8CE0},
	{0x170F332E2D2B271E, 0x1D1B},
}

// skewBytes is how many leading key bytes -s may replace.
const skewBytes = 6

// The -s tables of gensort.c (Skew_binary, Skew_ascii) are the first 6 key
// bytes of records 0..128 in each form; they are derived here rather than
// copied, and testdata/skew_tables.txt pins all 258 rows to gensort.c's text.
var skewBinary, skewASCII = func() (bin [129]uint64, asc [129][skewBytes]byte) {
	x := randAt(u128{0, 1})
	for k := range bin {
		bin[k] = x.hi >> 16 // top 48 bits
		var key [KeySize]byte
		asciiKey(key[:], x)
		copy(asc[k][:], key[:skewBytes])
		x = next(x)
	}
	return
}()

// skewIndex is gensort's get_skew_index: the number of significant bits of the
// record number, except that a record number with any of the top 4 bits of a
// 64-bit half set maps straight to 64 (low half) or 128 (high half).
func skewIndex(rec u128) int {
	const top4 = 0xF000000000000000
	if rec.hi == 0 {
		if rec.lo&top4 != 0 {
			return 64
		}
		return bits.Len64(rec.lo)
	}
	if rec.hi&top4 != 0 {
		return 128
	}
	return 64 + bits.Len64(rec.hi)
}

// Generate fills dst (len a multiple of Size) with records first, first+1, …
// exactly as gensort 1.5 would write them with the same options and -b first.
// Record numbers past 2^64-1 continue as gensort's 128-bit ones do.
func Generate(dst []byte, first uint64, opt GenOptions) {
	if len(dst)%Size != 0 {
		panic(fmt.Sprintf("record: Generate into %d bytes, not a multiple of %d", len(dst), Size))
	}
	n := len(dst) / Size
	if n == 0 {
		return
	}
	// vals[j] = X(first+done+1+j). A chunk of records needs its count plus
	// window-1 look-ahead values; the look-ahead is carried to the next chunk.
	const chunk = 256
	var vals [chunk + window - 1]u128
	rec := u128{0, first}
	x := randAt(rec.inc(1))
	filled := 0
	for done := 0; done < n; {
		m := min(chunk, n-done)
		need := m + window - 1
		if opt.ASCII {
			need = m // ASCII records use one value each
		}
		for ; filled < need; filled++ {
			vals[filled] = x
			x = next(x)
		}
		out := dst[done*Size : (done+m)*Size]
		switch {
		case opt.ASCII:
			for j := 0; j < m; j++ {
				r := out[j*Size : j*Size+Size : j*Size+Size]
				asciiRecord(r, vals[j], rec.inc(uint64(j)))
				if opt.Skew {
					skewASCIIKey(r, vals[j], rec.inc(uint64(j)))
				}
			}
		default:
			for j := 0; j < m; j++ {
				r := out[j*Size : j*Size+Size : j*Size+Size]
				binaryRecord(r, (*[window]u128)(vals[j:j+window]))
				if opt.Skew {
					skewBinaryKey(r, vals[j], rec.inc(uint64(j)))
				}
			}
		}
		// Keep the look-ahead values for the next chunk.
		filled = copy(vals[:], vals[m:filled])
		done += m
		rec = rec.inc(uint64(m))
	}
}

// binaryRecord writes gensort 1.5's binary record from the window of ten LCG
// outputs that starts with the record's own: the key is the top 10 bytes of
// v[0]; slot k is the top 10 bytes of v[k] XOR that slot's constant.
func binaryRecord(r []byte, v *[window]u128) {
	_ = r[Size-1]
	binary.BigEndian.PutUint64(r[0:], v[0].hi)
	binary.BigEndian.PutUint16(r[8:], uint16(v[0].lo>>48))
	for k := 1; k < window; k++ {
		o := k * 10
		binary.BigEndian.PutUint64(r[o:], v[k].hi^slotXor[k].hi)
		binary.BigEndian.PutUint16(r[o+8:], uint16(v[k].lo>>48)^slotXor[k].lo)
	}
}

// skewBinaryKey replaces the top 0..48 bits of the key (a count taken from 6
// bits of the record's random number; 49..63 mean "leave it") with those of
// the record's skew table entry.
func skewBinaryKey(r []byte, v u128, rec u128) {
	n := int(v.lo>>32) & 0x3F
	if n == 0 || n > 8*skewBytes {
		return
	}
	const low48 = 1<<48 - 1
	mask := low48 &^ (uint64(1)<<(48-n) - 1) // the n high bits of 48
	cur := binary.BigEndian.Uint64(r) >> 16
	cur = skewBinary[skewIndex(rec)]&mask | cur&^mask
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], cur<<16)
	copy(r[:skewBytes], b[:skewBytes])
}

const upperHex = "0123456789ABCDEF"

// asciiKey writes the 10 printable key characters of an ASCII record: 8 base-95
// digits of the high 64 bits, least significant first, then 2 of the low 64.
func asciiKey(r []byte, v u128) {
	t := v.hi
	for i := 0; i < 8; i++ {
		r[i] = byte(' ' + t%95)
		t /= 95
	}
	t = v.lo
	r[8] = byte(' ' + t%95)
	r[9] = byte(' ' + t/95%95)
}

// asciiRecord writes gensort 1.5's ASCII record: key, two spaces, the record
// number as 32 upper-case hex digits, two spaces, 13 hex digits of the low
// random bits each repeated 4 times, CR LF.
func asciiRecord(r []byte, v u128, rec u128) {
	_ = r[Size-1]
	asciiKey(r, v)
	r[10], r[11] = ' ', ' '
	for i := 0; i < 16; i++ {
		r[12+i] = upperHex[rec.hi>>(60-4*i)&0xF]
		r[28+i] = upperHex[rec.lo>>(60-4*i)&0xF]
	}
	r[44], r[45] = ' ', ' '
	for i := 0; i < 13; i++ {
		d := uint32(upperHex[v.lo>>(48-4*i)&0xF]) * 0x01010101
		binary.LittleEndian.PutUint32(r[46+4*i:], d)
	}
	r[98], r[99] = '\r', '\n'
}

// skewASCIIKey replaces the first 0..6 key characters (a count from 3 bits of
// the record's random number; 7 means "leave it") with the skew table's.
func skewASCIIKey(r []byte, v u128, rec u128) {
	n := int(v.lo>>32) & 0x7
	if n > skewBytes {
		return
	}
	copy(r[:n], skewASCII[skewIndex(rec)][:n])
}
