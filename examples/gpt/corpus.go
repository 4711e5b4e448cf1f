package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/xladdp/xladdp/internal/readlimit"
)

// DefaultCorpus is Debian's fortunes package (make deps installs it):
// 2.5 MB of plain English prose, verse and dialogue in 40 files, twice
// tiny Shakespeare's size, in Debian main and readable without tools.
const DefaultCorpus = "/usr/share/games/fortunes"

// maxCorpusBytes bounds what --data may load (the tokens live in memory).
const maxCorpusBytes = 1 << 30

// corpus is a text cut into character tokens: train and val are the first
// 90% and the last 10%, as nanoGPT splits shakespeare_char.
type corpus struct {
	vocab      []rune
	index      map[rune]int32
	train, val []int32
}

// loadCorpus reads a UTF-8 text file, or every fortune file of a
// directory (fortune's "%" separator lines become blank lines; its .dat
// indexes and .u8 links are skipped), in name order, at most
// maxCorpusBytes in all whatever the file is (a device or a pipe, whose
// size reads 0, included); reading ends when ctx does (a FIFO no process
// writes to).
func loadCorpus(ctx context.Context, path string) (*corpus, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--data %s: %w (make deps installs Debian's fortunes there, or name a UTF-8 text file)", path, err)
	}
	files := []string{path}
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("--data %s: %w", path, err)
		}
		files = files[:0]
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if e.Type().IsRegular() && ext != ".dat" && ext != ".u8" && !strings.HasPrefix(e.Name(), ".") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	}
	var text strings.Builder
	for _, f := range files {
		b, err := readlimit.ReadFile(ctx, f, maxCorpusBytes-int64(text.Len()), refuseNUL)
		if errors.Is(err, readlimit.ErrTooLarge) {
			return nil, fmt.Errorf("--data %s: more than %d MiB of text: train on a part of it", path, maxCorpusBytes>>20)
		}
		if err != nil {
			return nil, fmt.Errorf("--data: %w", err)
		}
		if !utf8.Valid(b) {
			return nil, fmt.Errorf("--data: %s is not UTF-8 text", f)
		}
		s := string(b)
		if info.IsDir() {
			s = strings.ReplaceAll(strings.ReplaceAll(s, "\n%\n", "\n\n"), "\r", "")
		}
		text.WriteString(s)
	}
	return newCorpus(text.String())
}

// refuseNUL refuses binary data (/dev/zero, an image) at its first chunk
// instead of reading it up to the limit.
func refuseNUL(chunk []byte) error {
	if bytes.IndexByte(chunk, 0) >= 0 {
		return errors.New("holds NUL bytes: not UTF-8 text")
	}
	return nil
}

// newCorpus tokenizes text by character, the vocabulary sorted.
func newCorpus(text string) (*corpus, error) {
	if utf8.RuneCountInString(text) < 100 {
		return nil, errors.New("--data: the text has fewer than 100 characters: nothing to learn from")
	}
	c := &corpus{index: map[rune]int32{}}
	for _, r := range text {
		if _, ok := c.index[r]; !ok {
			c.index[r] = 0
			c.vocab = append(c.vocab, r)
		}
	}
	slices.Sort(c.vocab)
	for i, r := range c.vocab {
		c.index[r] = int32(i)
	}
	tokens := make([]int32, 0, len(text))
	for _, r := range text {
		tokens = append(tokens, c.index[r])
	}
	n := len(tokens) * 9 / 10
	c.train, c.val = tokens[:n], tokens[n:]
	return c, nil
}

// decode turns tokens back into text.
func (c *corpus) decode(tokens []int32) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteRune(c.vocab[t])
	}
	return b.String()
}

// batch draws rows random windows of block+1 tokens from tokens, as
// nanoGPT's get_batch: inputs and next-token targets, row-major.
func batch(rng *rand.Rand, tokens []int32, rows, block int) (ids, targets []int32, err error) {
	if len(tokens) <= block {
		return nil, nil, fmt.Errorf("the split has %d tokens, fewer than --block %d + 1: use a smaller block or more text", len(tokens), block)
	}
	starts := make([]int, rows)
	for i := range starts {
		starts[i] = rng.IntN(len(tokens) - block)
	}
	ids, targets = windowsAt(tokens, starts, block)
	return ids, targets, nil
}

// windowsAt are the windows of block+1 tokens at starts: inputs and
// next-token targets, row-major.
func windowsAt(tokens []int32, starts []int, block int) (ids, targets []int32) {
	ids, targets = make([]int32, 0, len(starts)*block), make([]int32, 0, len(starts)*block)
	for _, at := range starts {
		ids = append(ids, tokens[at:at+block]...)
		targets = append(targets, tokens[at+1:at+block+1]...)
	}
	return ids, targets
}
