// Command determinism measures what --deterministic costs: the seed's
// MNIST job and the GPT, each at 1, 2 and 4 replicas (one process, then
// ddprun processes of one core each), normal and deterministic runs
// alternated, the median step time of each and where it goes (the
// examples' own "time per step" split), and the bytes a deterministic
// process hands to the others a step.
//
//	go run ./examples/bench/determinism --bin bin --rounds 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

type job struct {
	name string
	args []string
}

type layout struct {
	name   string
	launch []string // ddprun's flags; nil: the example alone
	args   []string
}

var (
	stepLine  = regexp.MustCompile(`time per step over \d+ steps: (.*?) = ([0-9.]+) ms`)
	tokenLine = regexp.MustCompile(`([0-9]+) tokens/s`)
	bytesLine = regexp.MustCompile(`deterministic exchange: ([0-9]+) bytes sent a step`)
)

func main() {
	bin := flag.String("bin", "bin", "directory with ddprun, mnist and gpt")
	rounds := flag.Int("rounds", 3, "alternated rounds of each pair")
	flag.Parse()
	if err := run(*bin, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "determinism:", err)
		os.Exit(1)
	}
}

func run(bin string, rounds int) error {
	jobs := []job{
		{"mnist", []string{"--max-steps", "200", "--batch-size", "64", "--micro-shard", "16"}},
		{"gpt", []string{"--steps", "60", "--eval-interval", "60", "--sample", "0", "--batch-size", "32", "--micro-shard", "8", "--dropout", "0.1"}},
	}
	layouts := []layout{
		{"1 replica", nil, []string{"--spawn", "--cpu-devices", "1"}},
		{"2 processes", []string{"--nproc_per_node=2"}, nil},
		{"4 processes", []string{"--nproc_per_node=4"}, nil},
	}
	fmt.Printf("%-6s %-12s %-14s %-14s %-8s %s\n", "job", "layout", "normal", "deterministic", "ratio", "deterministic: where the step goes; bytes sent a step")
	for _, j := range jobs {
		for _, l := range layouts {
			var normal, det []float64
			var split, sent string
			for range rounds {
				for _, on := range []bool{false, true} {
					v, s, b, err := once(bin, j, l, on)
					if err != nil {
						return err
					}
					if on {
						det, split, sent = append(det, v), s, b
					} else {
						normal = append(normal, v)
					}
				}
			}
			n, d := median(normal), median(det)
			unit := "ms"
			ratio := d / n
			if j.name == "gpt" { // tokens/s: higher is better
				unit, ratio = "tok/s", n/d
			}
			fmt.Printf("%-6s %-12s %8.1f %-5s %8.1f %-5s %6.2fx  %s; %s\n", j.name, l.name, n, unit, d, unit, ratio, split, sent)
		}
	}
	return nil
}

// once runs job in layout, deterministic or not, and returns its step
// time in ms (mnist) or tokens/s (gpt), the step's split and the bytes
// sent.
func once(bin string, j job, l layout, deterministic bool) (float64, string, string, error) {
	args := append(append([]string(nil), j.args...), l.args...)
	if deterministic {
		args = append(args, "--deterministic")
	} else {
		args = dropFlag(args, "--micro-shard")
	}
	program := filepath.Join(bin, j.name)
	argv := append([]string{program}, args...)
	if l.launch != nil {
		argv = append(append([]string{filepath.Join(bin, "ddprun")}, l.launch...), argv...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return 0, "", "", fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, out)
	}
	sent := "-"
	if m := bytesLine.FindSubmatch(out); m != nil {
		sent = string(m[1]) + " B"
	}
	if j.name == "gpt" {
		m := tokenLine.FindAllSubmatch(out, -1)
		if m == nil {
			return 0, "", "", errors.New("no tokens/s in the gpt output:\n" + string(out))
		}
		v, err := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
		return v, "", sent, err
	}
	m := stepLine.FindSubmatch(out)
	if m == nil {
		return 0, "", "", errors.New("no time per step in the mnist output:\n" + string(out))
	}
	v, err := strconv.ParseFloat(string(m[2]), 64)
	return v, string(m[1]), sent, err
}

func dropFlag(args []string, name string) []string {
	for i := 0; i < len(args); i++ {
		if args[i] == name && i+1 < len(args) {
			return append(args[:i:i], args[i+2:]...)
		}
	}
	return args
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
