package nodelist

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/xladdp/xladdp/internal/quote"
)

// Expand expands a SLURM host list as `scontrol show hostnames`
// does: "node[01-03,07],gpu-a" is node01, node02, node03, node07, gpu-a;
// several bracket groups in one name multiply; zero padding is kept.
func Expand(s string) ([]string, error) {
	var out []string
	for _, item := range splitTopLevel(s) {
		if item == "" {
			return nil, fmt.Errorf("an empty host name")
		}
		names, err := expandItem(item, MaxHosts-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, names...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no hosts")
	}
	return out, nil
}

// splitTopLevel splits at commas outside brackets.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, ch := range s {
		switch ch {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// MaxHosts bounds one list (a typo like [1-99999999] must not
// allocate without bound).
const MaxHosts = 1 << 16

// expandItem expands one comma-free item into at most limit names.
func expandItem(item string, limit int) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if strings.ContainsAny(item, "]") {
			return nil, fmt.Errorf("unbalanced ']' in %q", item)
		}
		return []string{item}, nil
	}
	closing := strings.IndexByte(item[open:], ']')
	if closing < 0 {
		return nil, fmt.Errorf("unbalanced '[' in %q", item)
	}
	closing += open
	prefix, body, rest := item[:open], item[open+1:closing], item[closing+1:]
	tails, err := expandItem(rest, limit)
	if err != nil {
		return nil, err
	}
	tooMany := fmt.Errorf("%s expands to more than %d hosts", quote.Short(item), MaxHosts)
	var out []string
	for _, part := range strings.Split(body, ",") {
		lo, hi, ranged := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if ranged {
			b, err2 = strconv.Atoi(hi)
		}
		if lo == "" || err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("bad range %s in %s", quote.Short(part), quote.Short(item))
		}
		// b-a cannot overflow (0 <= a <= b); b-a+1 and the product can.
		room := (limit - len(out)) / len(tails)
		if b-a >= room {
			return nil, tooMany
		}
		for n := a; n <= b && n >= a; n++ { // n >= a: b may be math.MaxInt
			num := strconv.Itoa(n)
			if len(num) < len(lo) {
				num = strings.Repeat("0", len(lo)-len(num)) + num
			}
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}
