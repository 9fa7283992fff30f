package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// multiValueFlags take every following argument up to the next flag, as the
// original course tools do: `-I in1 in2 in3 -O out`. expandMultiValueFlags
// rewrites them into the repeated form pflag understands (`-I in1 -I in2 …`).
var multiValueFlags = map[string]bool{"-I": true, "--input": true}

func expandMultiValueFlags(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		if !multiValueFlags[a] {
			out = append(out, a)
			continue
		}
		n := 0
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			out = append(out, a, args[i])
			n++
		}
		if n == 0 {
			out = append(out, a) // let pflag report the missing value
		}
	}
	return out
}

// parseSize parses a byte size such as 256MiB, 1G, 512k or 1000000. K/M/G/T
// and their -iB forms are powers of 1024, as in GNU sort's -S; KB/MB/GB/TB are
// powers of 1000.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return !unicode.IsDigit(r) && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (e.g. 256MiB, 1G)", s)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}[strings.ToLower(unit)]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q (use K, M, G, T, KiB…, KB…)", s, unit)
	}
	if v := f * mult; v < math.MaxInt64 {
		return int64(v), nil
	}
	return 0, fmt.Errorf("size %q is too large", s)
}

// sizeValue is a pflag.Value for byte sizes.
type sizeValue struct{ n *int64 }

func (v sizeValue) String() string {
	if v.n == nil || *v.n == 0 {
		return "0"
	}
	return formatBytes(*v.n)
}
func (v sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v.n = n
	return nil
}
func (v sizeValue) Type() string { return "size" }

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatInt(n, 10)
}
