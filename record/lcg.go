package record

import "math/bits"

// u128 is an unsigned 128-bit integer; arithmetic wraps mod 2^128.
type u128 struct{ hi, lo uint64 }

func (x u128) mul(y u128) u128 {
	hi, lo := bits.Mul64(x.lo, y.lo)
	hi += x.hi*y.lo + x.lo*y.hi
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, carry := bits.Add64(x.lo, y.lo, 0)
	return u128{x.hi + y.hi + carry, lo}
}

func (x u128) inc(n uint64) u128 {
	lo, carry := bits.Add64(x.lo, n, 0)
	return u128{x.hi + carry, lo}
}

// affine is the map x ↦ a·x + c mod 2^128.
type affine struct{ a, c u128 }

func (f affine) apply(x u128) u128 { return f.a.mul(x).add(f.c) }

// then returns the map "f, then g": x ↦ g(f(x)).
func (f affine) then(g affine) affine {
	return affine{a: g.a.mul(f.a), c: g.a.mul(f.c).add(g.c)}
}

// The gensort generator (rand16.c): a is from L'Ecuyer's table of LCGs with
// good lattice structure; c is "JimGrayRIP" in ASCII, spaces, then 0x01.
var lcg = affine{
	a: u128{0x2360ed051fc65da4, 0x4385df649fccf645},
	c: u128{0x4a696d4772617952, 0x4950202020202001},
}

// jumps[k] is the generator applied 2^k times (rand16.c keeps the same table
// as constants; squaring reproduces it and the tests pin a few entries).
var jumps = func() (t [128]affine) {
	t[0] = lcg
	for k := 1; k < len(t); k++ {
		t[k] = t[k-1].then(t[k-1])
	}
	return t
}()

// randAt returns X(n), the n-th number of the sequence X(0)=0,
// X(n+1)=a·X(n)+c, in O(log n) steps. Powers of one map commute, so the order
// the jumps are applied in does not matter.
func randAt(n u128) u128 {
	var x u128
	for k := 0; k < 64; k++ {
		if n.lo&(1<<k) != 0 {
			x = jumps[k].apply(x)
		}
		if n.hi&(1<<k) != 0 {
			x = jumps[64+k].apply(x)
		}
	}
	return x
}

func next(x u128) u128 { return lcg.apply(x) }
