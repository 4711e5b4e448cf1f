package progshare

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/xladdp/xladdp/ddp/store"
)

// Bounds of a shared program, as published and as fetched: a fetcher
// allocates nothing a manifest claims beyond them.
const (
	maxSharedProgram = 2 << 30
	programChunk     = 16 << 20
	maxManifest      = 4 << 10
)

// Exchange shares compiled programs over a job's store (it is
// xla.ProgramExchange, which this package does not import). The first
// process to Add the program's claim compiles it, beating a counter while
// it does; it then publishes the encoded program in chunks and a manifest
// (size, chunk count, sha256), or a manifest that withdraws it. The
// others poll for the manifest while the counter moves, and check
// everything against the manifest.
//
// Every process counts itself once it has the program, whether it
// published it, fetched it, or got it otherwise (Have: its node's disk
// cache, its own compilation), and the last of the world to count frees
// the chunks. Counting only the fetches would keep them for the whole job
// wherever a node's other ranks load the program from their shared disk
// cache. A program some process never needs stays until the store ends
// with the job; no process waits on the count.
type Exchange struct {
	st          store.Store
	rank, world int
	// beat is how often the compiling process says it lives; stall how
	// long the others wait without a beat before compiling themselves.
	beat, stall time.Duration
	// counted holds the names this process counted itself for, so that
	// it counts once however many ways it says so.
	counted sync.Map
}

// New is the exchange of rank of a job of world processes over st: the
// compiling process beats every 5 s, and a fetch gives up after a minute
// without a beat.
func New(st store.Store, rank, world int) *Exchange {
	return &Exchange{st: st, rank: rank, world: world, beat: 5 * time.Second, stall: time.Minute}
}

// manifest describes a published program.
type manifest struct {
	Size      int64  `json:"size,omitempty"`
	Chunks    int    `json:"chunks,omitempty"`
	SHA256    []byte `json:"sha256,omitempty"`
	Rank      int    `json:"rank"`
	Withdrawn string `json:"withdrawn,omitempty"`
	// Gone: every process has it and the chunks were freed.
	Gone bool `json:"gone,omitempty"`
}

func programKey(name, part string) string { return "xladdp/programs/" + name + "/" + part }

func (x *Exchange) Claim(ctx context.Context, name string) (bool, func([]byte), error) {
	n, err := x.st.Add(ctx, programKey(name, "claim"), 1)
	if err != nil || n != 1 {
		return false, nil, err
	}
	if raw, err := json.Marshal(thisProcess(x.rank)); err == nil {
		// Only a word for those who wait: a lost record makes them name
		// "the process compiling it".
		_ = x.st.Set(ctx, programKey(name, "claimant"), raw)
	}
	beatCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(x.beat)
		defer t.Stop()
		for {
			if _, err := x.st.Add(beatCtx, programKey(name, "beat"), 1); err != nil {
				return
			}
			select {
			case <-beatCtx.Done():
				return
			case <-t.C:
			}
		}
	})
	return true, func(file []byte) {
		stop()
		wg.Wait()
		if err := x.publish(ctx, name, file); err != nil {
			slog.Warn("xladdp: the job's other processes will compile this program themselves",
				"rank", x.rank, "program", short(name), "err", err)
			x.withdraw(ctx, name, err.Error())
			return
		}
		x.count(ctx, name)
	}, nil
}

// short is a program's name as the log gives it.
func short(name string) string { return name[:min(len(name), 12)] }

func (x *Exchange) withdraw(ctx context.Context, name, why string) {
	m, _ := json.Marshal(manifest{Rank: x.rank, Withdrawn: why})
	_ = x.st.Set(ctx, programKey(name, "manifest"), m)
}

// publish puts file in chunks, then the manifest that names them.
func (x *Exchange) publish(ctx context.Context, name string, file []byte) error {
	switch {
	case file == nil:
		return errors.New("its compilation failed here")
	case len(file) > maxSharedProgram:
		return fmt.Errorf("it is %d MiB, over the %d MiB a job shares", len(file)>>20, maxSharedProgram>>20)
	}
	m := manifest{Size: int64(len(file)), Chunks: chunksOf(int64(len(file))), Rank: x.rank}
	sum := sha256.Sum256(file)
	m.SHA256 = sum[:]
	for i := range m.Chunks {
		end := min((i+1)*programChunk, len(file))
		if err := x.st.Set(ctx, programKey(name, "chunk/"+strconv.Itoa(i)), file[i*programChunk:end]); err != nil {
			x.deleteChunks(ctx, name, i) // no manifest will name them
			return fmt.Errorf("publishing chunk %d: %w", i, err)
		}
	}
	raw, err := json.Marshal(m)
	if err == nil {
		err = x.st.Set(ctx, programKey(name, "manifest"), raw)
	}
	if err != nil {
		x.deleteChunks(ctx, name, m.Chunks)
		return fmt.Errorf("publishing its manifest: %w", err)
	}
	return nil
}

func chunksOf(size int64) int { return int((size + programChunk - 1) / programChunk) }

// Fetch waits, while the compiling process beats, for the manifest (in
// the store's own waits of a second, so it sees the manifest the moment
// it is set), then takes the chunks it names. A claimant silent for two
// beats is named every notice while it stays so; one seen stopped on
// this host is passed at once, and any after x.stall of silence: this
// process then compiles the program itself.
func (x *Exchange) Fetch(ctx context.Context, name string) ([]byte, error) {
	last, heard, said := int64(-1), time.Now(), time.Time{}
	for {
		slice, cancel := context.WithTimeout(ctx, fetchSlice)
		err := x.st.Wait(slice, programKey(name, "manifest"))
		cancel()
		var te *store.TimeoutError
		switch {
		case err == nil:
			return x.take(ctx, name)
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case !errors.As(err, &te):
			return nil, err
		}
		beats, err := x.st.Add(ctx, programKey(name, "beat"), 0)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		if beats != last {
			last, heard = beats, now
			continue
		}
		silent := now.Sub(heard)
		if silent < 2*x.beat {
			continue
		}
		who, stopped := x.describeClaimant(ctx, name)
		switch {
		case stopped:
			return nil, fmt.Errorf("%s, which compiles it, is stopped", who)
		case silent > x.stall:
			return nil, fmt.Errorf("%s, which compiles it, has not been heard from for %v", who, silent.Round(time.Second))
		case now.Sub(said) >= x.notice():
			said = now
			slog.Warn(fmt.Sprintf("xladdp: waiting for %s to compile a program; not heard from for %v; compiling it here after %v",
				who, silent.Round(time.Second), x.stall.Round(time.Second)), "rank", x.rank, "program", short(name))
		}
	}
}

// notice is how often a wait on a silent claimant is said.
func (x *Exchange) notice() time.Duration { return 2 * x.beat }

// describeClaimant names the claimant of name (see claimant.describe).
func (x *Exchange) describeClaimant(ctx context.Context, name string) (who string, stopped bool) {
	c, ok := x.claimantOf(ctx, name)
	if !ok {
		return "the process compiling it", false
	}
	return c.describe()
}

// fetchSlice is one wait for the manifest between looks at the beat.
const fetchSlice = time.Second

// take reads a published program, checking every part against the
// manifest before allocating for it.
func (x *Exchange) take(ctx context.Context, name string) ([]byte, error) {
	raw, err := x.st.Get(ctx, programKey(name, "manifest"))
	if err != nil {
		return nil, err
	}
	var m manifest
	if len(raw) > maxManifest {
		return nil, fmt.Errorf("its manifest is %d bytes, over %d", len(raw), maxManifest)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("its manifest: %w", err)
	}
	switch {
	case m.Withdrawn != "":
		return nil, fmt.Errorf("rank %d, which compiled it first, did not publish it: %s", m.Rank, m.Withdrawn)
	case m.Gone:
		return nil, errors.New("the job's store no longer holds it (every process of the job had it)")
	case m.Size <= 0 || m.Size > maxSharedProgram || m.Chunks != chunksOf(m.Size) || len(m.SHA256) != sha256.Size:
		return nil, fmt.Errorf("its manifest is not one a process publishes (%d bytes in %d chunks)", m.Size, m.Chunks)
	}
	if err := x.checkChunks(ctx, name, m); err != nil {
		return nil, err
	}
	// Grown as the chunks arrive: what is allocated is what the store
	// gave, whatever the manifest says.
	var file []byte
	for i := range m.Chunks {
		chunk, err := x.getChunk(ctx, name, i)
		if err != nil {
			return nil, fmt.Errorf("chunk %d: %w", i, err)
		}
		if want := min(int64(programChunk), m.Size-int64(i)*programChunk); int64(len(chunk)) != want {
			return nil, fmt.Errorf("chunk %d has %d bytes, the manifest %d", i, len(chunk), want)
		}
		file = append(file, chunk...)
	}
	if sum := sha256.Sum256(file); !bytes.Equal(sum[:], m.SHA256) {
		return nil, fmt.Errorf("its %d bytes do not match the sha256 rank %d published", m.Size, m.Rank)
	}
	x.count(ctx, name)
	return file, nil
}

// checkChunks makes sure the chunks m names are in the store before any
// is read (a Get of a missing key waits for it).
func (x *Exchange) checkChunks(ctx context.Context, name string, m manifest) error {
	keys := make([]string, m.Chunks)
	for i := range keys {
		keys[i] = programKey(name, "chunk/"+strconv.Itoa(i))
	}
	found, err := x.st.Check(ctx, keys...)
	if err != nil {
		return fmt.Errorf("looking for its chunks: %w", err)
	}
	var missing []int
	for i, ok := range found {
		if !ok {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("its manifest names %d chunks (%d bytes), and the store lacks %d of them (the first: %d)",
			m.Chunks, m.Size, len(missing), missing[0])
	}
	return nil
}

// chunkWait bounds the read of one chunk that was there when checked
// (freed since, it would be waited for forever).
const chunkWait = time.Minute

// getChunk reads the program's chunk i.
func (x *Exchange) getChunk(ctx context.Context, name string, i int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, chunkWait)
	defer cancel()
	return x.st.Get(ctx, programKey(name, "chunk/"+strconv.Itoa(i)))
}

// Have says this process has the program name without the exchange
// (its disk cache, its own compilation), so that the store frees the
// program once every process has it. Publishing and fetching count
// already; a process counts once.
func (x *Exchange) Have(ctx context.Context, name string) { x.count(ctx, name) }

// count counts this process among those that have the program, once;
// the world's last frees its chunks. A count lost to a store error only
// keeps the program in the store until the job ends.
func (x *Exchange) count(ctx context.Context, name string) {
	if _, again := x.counted.LoadOrStore(name, true); again {
		return
	}
	n, err := x.st.Add(ctx, programKey(name, "have"), 1)
	if err == nil && n == int64(x.world) {
		x.free(ctx, name)
	}
}

// free marks a published program gone, then deletes the chunks its
// manifest names and its claimant's record: every process has it, so nobody fetches them. The
// publisher counts itself after publishing, so the last count finds the
// manifest set if the program was ever published.
func (x *Exchange) free(ctx context.Context, name string) {
	found, err := x.st.Check(ctx, programKey(name, "manifest"))
	if err != nil || !found[0] {
		return // nobody published it: every process had it on disk
	}
	raw, err := x.st.Get(ctx, programKey(name, "manifest"))
	var m manifest
	if err != nil || len(raw) > maxManifest || json.Unmarshal(raw, &m) != nil || m.Gone || m.Withdrawn != "" {
		return
	}
	gone, _ := json.Marshal(manifest{Rank: m.Rank, Gone: true})
	if x.st.Set(ctx, programKey(name, "manifest"), gone) == nil {
		x.deleteChunks(ctx, name, m.Chunks)
		_, _ = x.st.Delete(ctx, programKey(name, "claimant"))
	}
}

// deleteChunks deletes the program's first n chunks.
func (x *Exchange) deleteChunks(ctx context.Context, name string, n int) {
	for i := range min(n, chunksOf(maxSharedProgram)) {
		_, _ = x.st.Delete(ctx, programKey(name, "chunk/"+strconv.Itoa(i)))
	}
}
