package bspa_test

import (
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"

	bspa "github.com/bspa-project/bspa/bindings/go"
)

const reusableMaxTokens = 64

func reusableOptions(fixed bool) bspa.BatchOptions {
	return bspa.BatchOptions{MaxSeqs: 4, MaxTokens: reusableMaxTokens, MaxSeqTokens: 300, MaxQueryLen: 40,
		FixedLaunchShape: fixed}
}

func normals(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

func randomTokens(rng *rand.Rand, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = rng.Int31n(50000)
	}
	return out
}

// launchStep writes K/V and runs the prefill of a step's t rows through b, padded to
// b.Rows() rows; the padding of out and lse is poisoned.
func launchStep(t *testing.T, pool *bspa.Pool, b *bspa.Batch, l *bspa.Layout, q, k, v []float32) ([]float32, []float32) {
	t.Helper()
	rows := b.Rows()
	pad := func(x []float32, heads int) []float32 {
		return append(append([]float32(nil), x...), make([]float32, rows*heads*dim-len(x))...)
	}
	out := make([]float32, rows*hq*dim)
	lse := make([]float32, hq*rows)
	for i := range out {
		out[i] = 1234.5
	}
	for i := range lse {
		lse[i] = -77
	}
	must(t, pool.KVWriteF32(b, 0, pad(k, hkv), pad(v, hkv)))
	must(t, pool.PrefillF32(b, 0, l, pad(q, hq), out, scale, lse))
	return out, lse
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// A decode loop planned into one reusable batch computes, step by step, bitwise what a
// one-step batch of the same step computes; rows past the step are not written.
func testReusableDecodeLoop(t *testing.T, fixed bool) {
	rng := rand.New(rand.NewSource(11))
	pool := newPool(t, 128)
	l := stridedLayout(t)
	b, err := pool.NewReusableBatch(reusableOptions(fixed))
	must(t, err)
	defer b.Close()
	var seqs []*bspa.Sequence
	for _, n := range []int{37, 5, 20} {
		s, err := pool.NewSequence()
		must(t, err)
		must(t, s.Append(randomTokens(rng, n)))
		seqs = append(seqs, s)
	}
	for step := 0; step < 8; step++ {
		if step == 4 { // one finishes (closed while the plan holds it), one joins
			must(t, seqs[1].Close())
			s, err := pool.NewSequence()
			must(t, err)
			must(t, s.Append(randomTokens(rng, 11)))
			seqs[1] = s
		}
		if step == 5 {
			s, err := pool.NewSequence()
			must(t, err)
			must(t, s.Append(randomTokens(rng, 3)))
			seqs = append(seqs, s)
		}
		lens := make([]int32, len(seqs))
		total := 0
		for i, s := range seqs {
			info, err := s.Info()
			must(t, err)
			if info.NumTokens == info.NumComputed {
				must(t, s.Append(randomTokens(rng, 1)))
			}
			info, err = s.Info()
			must(t, err)
			lens[i] = int32(info.NumTokens - info.NumComputed)
			total += int(lens[i])
		}
		q, k, v := normals(rng, total*hq*dim), normals(rng, total*hkv*dim), normals(rng, total*hkv*dim)
		one, err := pool.NewBatch(seqs, lens, 0)
		must(t, err)
		wantOut, wantLSE := launchStep(t, pool, one, l, q, k, v)
		must(t, one.Close())
		must(t, b.Plan(seqs, lens, 0))
		rows := total
		if fixed {
			rows = reusableMaxTokens
		}
		if b.NumTokens() != total || b.Rows() != rows {
			t.Fatalf("step %d: NumTokens %d, Rows %d; want %d, %d", step, b.NumTokens(), b.Rows(), total, rows)
		}
		out, lse := launchStep(t, pool, b, l, q, k, v)
		if !sameBits(out[:total*hq*dim], wantOut) {
			t.Fatalf("step %d: outputs differ", step)
		}
		for h := 0; h < hq; h++ {
			if !sameBits(lse[h*rows:h*rows+total], wantLSE[h*total:(h+1)*total]) {
				t.Fatalf("step %d: lse of head %d differs", step, h)
			}
			for _, x := range lse[h*rows+total : (h+1)*rows] {
				if x != -77 {
					t.Fatalf("step %d: lse past the step written", step)
				}
			}
		}
		for _, x := range out[total*hq*dim:] {
			if x != 1234.5 {
				t.Fatalf("step %d: a row past the step written", step)
			}
		}
		for i, s := range seqs {
			info, err := s.Info()
			must(t, err)
			must(t, s.Commit(int(info.NumComputed)+int(lens[i])))
		}
		must(t, pool.Check())
	}
}

func TestReusableBatchStepsEqualOneStepBatches(t *testing.T) { testReusableDecodeLoop(t, false) }

func TestReusableBatchFixedShapeStepsEqualOneStepBatches(t *testing.T) {
	testReusableDecodeLoop(t, true)
}

func TestReusableBatchRefusalKeepsThePreviousPlan(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	pool := newPool(t, 128)
	l, err := bspa.NewDenseLayout(hq)
	must(t, err)
	defer l.Close()
	opts := reusableOptions(false)
	opts.MaxSeqs = 2
	b, err := pool.NewReusableBatch(opts)
	must(t, err)
	defer b.Close()
	k := normals(rng, 8*hkv*dim)
	q := normals(rng, 8*hq*dim)
	out := make([]float32, len(q))
	// Before any plan: the raw launch is refused by the library.
	err = pool.Prefill(b, 0, l, bspa.HostF32(q, 8, hq, dim), bspa.HostF32(out, 8, hq, dim), scale, nil, 0)
	if !errors.Is(err, bspa.ErrInvalidState) {
		t.Fatalf("a launch before the first plan: %v", err)
	}
	var seqs []*bspa.Sequence
	for _, n := range []int{8, 1, 1} {
		s, err := pool.NewSequence()
		must(t, err)
		must(t, s.Append(randomTokens(rng, n)))
		seqs = append(seqs, s)
	}
	must(t, b.Plan(seqs[:1], []int32{8}, 0))
	must(t, pool.KVWriteF32(b, 0, k, k))
	must(t, pool.PrefillF32(b, 0, l, q, out, scale, nil))
	first := append([]float32(nil), out...)
	before, err := pool.Stats()
	must(t, err)
	err = b.Plan(seqs, []int32{8, 1, 1}, 0)
	var e *bspa.Error
	if !errors.Is(err, bspa.ErrOutOfRange) || !errors.As(err, &e) || !strings.Contains(e.Message, "max_seqs") {
		t.Fatalf("past max_seqs: %v", err)
	}
	if err := b.Plan([]*bspa.Sequence{seqs[0], seqs[0]}, []int32{8, 8}, 0); !errors.Is(err, bspa.ErrInvalidArgument) {
		t.Fatalf("the same sequence twice: %v", err)
	}
	if err := b.Plan(seqs[:2], []int32{8}, 0); !errors.Is(err, bspa.ErrInvalidArgument) {
		t.Fatalf("2 sequences, 1 query length: %v", err)
	}
	after, err := pool.Stats()
	must(t, err)
	if after != before || b.NumTokens() != 8 {
		t.Fatalf("a refused plan changed the pool or the batch: %+v -> %+v, %d tokens", before, after, b.NumTokens())
	}
	for i := range out {
		out[i] = float32(math.NaN())
	}
	must(t, pool.PrefillF32(b, 0, l, q, out, scale, nil))
	if !sameBits(out, first) {
		t.Fatal("the previous plan no longer computes the same")
	}
	one, err := pool.NewBatch(seqs[:1], []int32{8}, 0)
	must(t, err)
	defer one.Close()
	if err := one.Plan(seqs[:1], []int32{8}, 0); !errors.Is(err, bspa.ErrInvalidArgument) {
		t.Fatalf("re-planning a one-step batch: %v", err)
	}
	if _, ok := one.Reusable(); ok {
		t.Fatal("a one-step batch says it is reusable")
	}
	must(t, pool.Check())
}

func TestReusableBatchOptionErrors(t *testing.T) {
	pool := newPool(t, 16)
	var e *bspa.Error
	_, err := pool.NewReusableBatch(bspa.BatchOptions{})
	if !errors.Is(err, bspa.ErrInvalidArgument) || !errors.As(err, &e) || !strings.Contains(e.Message, "max_seqs") {
		t.Fatalf("zero limits: %v", err)
	}
	opts := reusableOptions(false)
	opts.MaxQueryLen = 65
	if _, err := pool.NewReusableBatch(opts); err == nil || !strings.Contains(err.Error(), "max_query_len = 65") {
		t.Fatalf("max_query_len past max_tokens: %v", err)
	}
	opts = reusableOptions(false)
	opts.MaxDecodeQueryLen = -1
	if _, err := pool.NewReusableBatch(opts); !errors.Is(err, bspa.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "max_decode_query_len = -1") {
		t.Fatalf("MaxDecodeQueryLen = -1: %v", err)
	}
	opts = reusableOptions(true)
	opts.MaxDecodeQueryLen = 1
	bounded, err := pool.NewReusableBatch(opts)
	must(t, err)
	if got, ok := bounded.Reusable(); !ok || got.MaxDecodeQueryLen != 1 {
		t.Fatalf("Reusable() = %+v, %v", got, ok)
	}
	must(t, bounded.Close())
	opts = reusableOptions(false)
	opts.MaxSeqs = 1 << 40
	if _, err := pool.NewReusableBatch(opts); !errors.Is(err, bspa.ErrInvalidArgument) {
		t.Fatalf("MaxSeqs past int32: %v", err)
	}
	opts = reusableOptions(false)
	opts.MaxQueryLen = 0
	b, err := pool.NewReusableBatch(opts)
	must(t, err)
	if got, ok := b.Reusable(); !ok || got.MaxQueryLen != reusableMaxTokens {
		t.Fatalf("Reusable() = %+v, %v", got, ok)
	}
	other := newPool(t, 16)
	stranger, err := other.NewSequence()
	must(t, err)
	must(t, stranger.Append([]int32{1, 2}))
	if err := b.Plan([]*bspa.Sequence{stranger}, []int32{2}, 0); !errors.Is(err, bspa.ErrInvalidArgument) {
		t.Fatalf("a sequence of another pool: %v", err)
	}
	// Closing the pool closes the batch.
	mine, err := pool.NewSequence()
	must(t, err)
	must(t, pool.Close())
	if err := b.Plan([]*bspa.Sequence{mine}, []int32{0}, 0); !errors.Is(err, bspa.ErrClosed) {
		t.Fatalf("Plan after the pool's Close: %v", err)
	}
	must(t, b.Close())
}

func TestReusableBatchReleasesThePreviousPlanAndSurvivesItsSequences(t *testing.T) {
	allocs, frees, err := bspa.DeviceAllocationCounts()
	must(t, err)
	pool := newPool(t, 128)
	b, err := pool.NewReusableBatch(reusableOptions(false))
	must(t, err)
	s, err := pool.NewSequence()
	must(t, err)
	must(t, s.Append(iota32(40))) // 3 pages
	must(t, b.Plan([]*bspa.Sequence{s}, []int32{40}, 0))
	must(t, s.Close()) // the batch stays open, its plan holds the pages
	st, err := pool.Stats()
	must(t, err)
	if st.PagesInUse != 3 {
		t.Fatalf("%d pages in use, want the plan's 3", st.PagesInUse)
	}
	next, err := pool.NewSequence()
	must(t, err)
	must(t, next.Append([]int32{7}))
	must(t, b.Plan([]*bspa.Sequence{next}, []int32{1}, 0))
	st, err = pool.Stats()
	must(t, err)
	if st.PagesInUse != 1 {
		t.Fatalf("%d pages in use after re-planning, want 1", st.PagesInUse)
	}
	must(t, b.Close())
	a2, f2, err := bspa.DeviceAllocationCounts()
	must(t, err)
	if a2 != allocs || f2 != frees {
		t.Fatalf("a CPU pool made device allocations: %d/%d -> %d/%d", allocs, frees, a2, f2)
	}
}
