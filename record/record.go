package record

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"strconv"
)

// Size is the length of one record in bytes.
const Size = 100

// KeySize is the length of a record's key: its leading bytes, compared as
// unsigned bytes (memcmp order).
const KeySize = 10

// CompareKeys compares the keys (first KeySize bytes) of two records, or two
// keys, like bytes.Compare.
func CompareKeys(a, b []byte) int { return bytes.Compare(a[:KeySize], b[:KeySize]) }

// keyParts splits a key into a big-endian uint64 and uint16 so that comparing
// the pairs is comparing the keys: two loads instead of a byte loop.
func keyParts(k []byte) (uint64, uint16) {
	return binary.BigEndian.Uint64(k), binary.BigEndian.Uint16(k[8:KeySize])
}

// Checksum is valsort's order-independent record checksum: the 128-bit sum of
// the zlib crc32 (hash/crc32 IEEE) of each record. Equal counts and equal
// checksums mean one set of records is, with overwhelming probability, a
// permutation of the other. The zero value is the checksum of no records.
type Checksum struct{ Hi, Lo uint64 }

// Add adds one record's crc. rec must hold at least Size bytes; only the first
// Size are summed.
func (c *Checksum) Add(rec []byte) {
	var carry uint64
	c.Lo, carry = bits.Add64(c.Lo, uint64(crc32.ChecksumIEEE(rec[:Size])), 0)
	c.Hi += carry
}

// AddAll adds every record in buf. len(buf) must be a multiple of Size.
func (c *Checksum) AddAll(buf []byte) {
	if len(buf)%Size != 0 {
		panic(fmt.Sprintf("record: AddAll of %d bytes, not a multiple of %d", len(buf), Size))
	}
	// A record's crc is < 2^32, so 2^31 of them fit in a uint64 without
	// overflow; sum locally and carry once.
	var sum uint64
	for off := 0; off < len(buf); off += Size {
		sum += uint64(crc32.ChecksumIEEE(buf[off : off+Size]))
		if sum >= 1<<63 {
			c.addUint64(sum)
			sum = 0
		}
	}
	c.addUint64(sum)
}

func (c *Checksum) addUint64(v uint64) {
	var carry uint64
	c.Lo, carry = bits.Add64(c.Lo, v, 0)
	c.Hi += carry
}

// Plus returns the sum of two checksums (the checksum of both record sets).
func (c Checksum) Plus(o Checksum) Checksum {
	lo, carry := bits.Add64(c.Lo, o.Lo, 0)
	return Checksum{Hi: c.Hi + o.Hi + carry, Lo: lo}
}

// String prints the checksum exactly as valsort ("Checksum: …") and
// gensort -c do: lower-case hex without leading zeros ("0" for none).
func (c Checksum) String() string {
	if c.Hi == 0 {
		return strconv.FormatUint(c.Lo, 16)
	}
	return fmt.Sprintf("%x%016x", c.Hi, c.Lo)
}

// ParseChecksum parses the hex form printed by String (1 to 32 hex digits,
// either case).
func ParseChecksum(s string) (Checksum, error) {
	if len(s) == 0 || len(s) > 32 {
		return Checksum{}, fmt.Errorf("record: checksum %q: want 1 to 32 hex digits", s)
	}
	var c Checksum
	for i := 0; i < len(s); i++ {
		d, ok := hexVal(s[i])
		if !ok {
			return Checksum{}, fmt.Errorf("record: checksum %q: %q is not a hex digit", s, s[i])
		}
		c.Hi = c.Hi<<4 | c.Lo>>60
		c.Lo = c.Lo<<4 | uint64(d)
	}
	return c, nil
}

func hexVal(b byte) (byte, bool) {
	switch {
	case '0' <= b && b <= '9':
		return b - '0', true
	case 'a' <= b && b <= 'f':
		return b - 'a' + 10, true
	case 'A' <= b && b <= 'F':
		return b - 'A' + 10, true
	}
	return 0, false
}

// MarshalText implements encoding.TextMarshaler with the String form.
func (c Checksum) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler for the String form.
func (c *Checksum) UnmarshalText(b []byte) error {
	v, err := ParseChecksum(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}
