package bspa_test

import (
	"errors"
	"math"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"bspa"
)

const (
	hq, hkv, dim = 4, 2, 16
	page         = 16
	block        = 16
	local, vert  = 2, 3
	scale        = float32(0.3)
)

func newPool(t *testing.T, pages int64) *bspa.Pool {
	t.Helper()
	opts := bspa.DefaultPoolOptions()
	opts.DType, opts.NumKVHeads, opts.HeadDim, opts.PageSize, opts.NumPages = bspa.F32, hkv, dim, page, pages
	pool, err := bspa.NewPool(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func iota32(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

func TestVersionAndABI(t *testing.T) {
	must(t, bspa.CheckABI())
	if bspa.Version() != "0.1.0" || !strings.Contains(bspa.BuildInfo(), "cpu") {
		t.Fatalf("version %q, build info %q", bspa.Version(), bspa.BuildInfo())
	}
}

func TestPrefixHit(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	pool := newPool(t, 8)
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = rng.Int31n(32000)
	}
	first, err := pool.NewSequence()
	must(t, err)
	if cached, err := first.Match(prompt); err != nil || cached != 0 {
		t.Fatalf("first match: %d, %v", cached, err)
	}
	must(t, first.Append(prompt))
	must(t, first.Commit(len(prompt)))
	must(t, first.Close())

	followUp := append(append([]int32(nil), prompt...), 1, 2, 3, 4, 5, 6, 7, 8, 9)
	second, err := pool.NewSequence()
	must(t, err)
	cached, err := second.Match(followUp)
	must(t, err)
	if cached != 32 {
		t.Fatalf("cached %d tokens, want 32 (two full pages)", cached)
	}
	info, err := second.Info()
	must(t, err)
	if info != (bspa.SeqInfo{NumTokens: 32, NumComputed: 32, NumCached: 32, NumPages: 2}) {
		t.Fatalf("info %+v", info)
	}
	stats, err := pool.Stats()
	must(t, err)
	if stats.Hits != 1 || stats.Misses != 1 || stats.MatchedTokens != 32 {
		t.Fatalf("stats %+v", stats)
	}
	other, err := pool.NewSequenceWith(bspa.SequenceOptions{Salt: []byte("tenant-b")})
	must(t, err)
	if cached, err := other.Match(followUp); err != nil || cached != 0 {
		t.Fatalf("another salt matched %d tokens (%v)", cached, err)
	}
	must(t, pool.Check())
}

func TestOutOfPagesIsAnErrorValueAndChangesNothing(t *testing.T) {
	pool := newPool(t, 4)
	seq, err := pool.NewSequence()
	must(t, err)
	must(t, seq.Append(iota32(20)))
	stats, _ := pool.Stats()
	info, _ := seq.Info()
	err = seq.Append(iota32(100))
	if !errors.Is(err, bspa.ErrOutOfPages) {
		t.Fatalf("got %v, want ErrOutOfPages", err)
	}
	if errors.Is(err, bspa.ErrInvalidArgument) {
		t.Fatal("an out-of-pages error matched ErrInvalidArgument")
	}
	var e *bspa.Error
	if !errors.As(err, &e) || e.Status != bspa.StatusOutOfPages || e.Status.Category() != 3 ||
		!strings.Contains(e.Message, "bspa_seq_append") || !strings.HasPrefix(err.Error(), "BSPA_ERR_OUT_OF_PAGES: ") {
		t.Fatalf("error %#v", err)
	}
	if s, _ := pool.Stats(); s != stats {
		t.Fatalf("stats changed: %+v -> %+v", stats, s)
	}
	if i, _ := seq.Info(); i != info {
		t.Fatalf("sequence changed: %+v -> %+v", info, i)
	}
	must(t, pool.Check())
}

func TestInvalidArgumentsAndClosedHandles(t *testing.T) {
	opts := bspa.DefaultPoolOptions()
	opts.PageSize, opts.NumPages = 48, 4
	_, err := bspa.NewPool(opts)
	if !errors.Is(err, bspa.ErrInvalidArgument) || !strings.Contains(err.Error(), "page_size = 48") {
		t.Fatalf("got %v", err)
	}
	pool := newPool(t, 4)
	seq, err := pool.NewSequence()
	must(t, err)
	must(t, seq.Append([]int32{1, 2, 3}))
	if _, err := seq.Match([]int32{1, 2, 3}); !errors.Is(err, bspa.ErrInvalidState) {
		t.Fatalf("match on a non-empty sequence: %v", err)
	}
	batch, err := pool.NewBatch([]*bspa.Sequence{seq}, []int32{3}, 0)
	must(t, err)
	must(t, seq.Close()) // closes the batch that uses it first
	if err := pool.KVWriteF32(batch, 0, make([]float32, 3*hkv*dim), make([]float32, 3*hkv*dim)); err != bspa.ErrClosed {
		t.Fatalf("launch on a batch of a closed sequence: %v", err)
	}
	must(t, pool.Close())
	must(t, pool.Close())
	if _, err := pool.Stats(); err != bspa.ErrClosed {
		t.Fatalf("stats of a closed pool: %v", err)
	}
}

func stridedAllowed(h, qb, kb int) bool {
	s := vert / hq
	if s < 1 {
		s = 1
	}
	return kb <= qb && (qb-kb < local || (kb+h*s+1)%vert == 0)
}

func stridedLayout(t *testing.T) *bspa.Layout {
	l, err := bspa.NewStridedLayout(bspa.StridedOptions{BlockSize: block, LocalBlocks: local, VertStride: vert,
		NumHeadsTotal: hq, NumHeads: hq})
	must(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

func TestStridedLayoutFollowsTheRule(t *testing.T) {
	l := stridedLayout(t)
	for h := 0; h < hq; h++ {
		for qb := 0; qb < 12; qb++ {
			for kb := 0; kb < 12; kb++ {
				got, err := l.Allowed(h, int64(qb), int64(kb))
				must(t, err)
				if got != stridedAllowed(h, qb, kb) {
					t.Fatalf("allowed(%d, %d, %d) = %v", h, qb, kb, got)
				}
			}
		}
	}
	if _, err := l.Allowed(hq, 0, 0); !errors.Is(err, bspa.ErrOutOfRange) {
		t.Fatalf("head out of range: %v", err)
	}
}

// conversation holds Q/K/V of every absolute position ([pos][head][dim]).
type conversation struct {
	tokens  []int32
	q, k, v []float32
}

func newConversation(rng *rand.Rand, n int) *conversation {
	normals := func(m int) []float32 {
		out := make([]float32, m)
		for i := range out {
			out[i] = float32(rng.NormFloat64())
		}
		return out
	}
	c := &conversation{tokens: make([]int32, n), q: normals(n * hq * dim), k: normals(n * hkv * dim), v: normals(n * hkv * dim)}
	for i := range c.tokens {
		c.tokens[i] = rng.Int31n(32000)
	}
	return c
}

// reference: attention of new tokens [ctx, ctx+q) over keys [0, ctx+q) in float64,
// masked per token.
func reference(c *conversation, ctx, q int, allowed func(h, qb, kb int) bool) (out, lse []float64) {
	out, lse = make([]float64, q*hq*dim), make([]float64, hq*q)
	for h := 0; h < hq; h++ {
		kvh := h / (hq / hkv)
		for i := 0; i < q; i++ {
			p := ctx + i
			var visible []int
			var logits []float64
			m := math.Inf(-1)
			for j := 0; j <= p; j++ {
				if !allowed(h, p/block, j/block) {
					continue
				}
				dot := 0.0
				for d := 0; d < dim; d++ {
					dot += float64(c.q[(p*hq+h)*dim+d]) * float64(c.k[(j*hkv+kvh)*dim+d])
				}
				visible, logits = append(visible, j), append(logits, dot*float64(scale))
				m = math.Max(m, dot*float64(scale))
			}
			denom := 0.0
			for _, l := range logits {
				denom += math.Exp(l - m)
			}
			for n, j := range visible {
				w := math.Exp(logits[n]-m) / denom
				for d := 0; d < dim; d++ {
					out[(i*hq+h)*dim+d] += w * float64(c.v[(j*hkv+kvh)*dim+d])
				}
			}
			lse[h*q+i] = math.Log(denom) + m
		}
	}
	return out, lse
}

func relL2(got []float32, want []float64) float64 {
	num, den := 0.0, 0.0
	for i := range want {
		diff := float64(got[i]) - want[i]
		num, den = num+diff*diff, den+want[i]*want[i]
	}
	return math.Sqrt(num / den)
}

type work struct {
	seq     *bspa.Sequence
	conv    *conversation
	ctx, nq int
}

// stepAndCheck runs one batch (kv write then prefill) and checks every sequence's rows.
func stepAndCheck(t *testing.T, pool *bspa.Pool, layout *bspa.Layout, items []work, allowed func(h, qb, kb int) bool) {
	t.Helper()
	var seqs []*bspa.Sequence
	var lens []int32
	var k, v, q []float32
	for _, w := range items {
		seqs, lens = append(seqs, w.seq), append(lens, int32(w.nq))
		k = append(k, w.conv.k[w.ctx*hkv*dim:(w.ctx+w.nq)*hkv*dim]...)
		v = append(v, w.conv.v[w.ctx*hkv*dim:(w.ctx+w.nq)*hkv*dim]...)
		q = append(q, w.conv.q[w.ctx*hq*dim:(w.ctx+w.nq)*hq*dim]...)
	}
	batch, err := pool.NewBatch(seqs, lens, 0)
	must(t, err)
	defer batch.Close()
	total := batch.NumTokens()
	must(t, pool.KVWriteF32(batch, 0, k, v))
	out, lse := make([]float32, len(q)), make([]float32, hq*total)
	for i := range out {
		out[i] = float32(math.NaN()) // poisoned: unwritten rows fail
	}
	must(t, pool.PrefillF32(batch, 0, layout, q, out, scale, lse))
	row := 0
	for _, w := range items {
		refOut, refLSE := reference(w.conv, w.ctx, w.nq, allowed)
		if e := relL2(out[row*hq*dim:(row+w.nq)*hq*dim], refOut); !(e <= 1e-5) {
			t.Fatalf("ctx %d q %d: relative L2 error %g", w.ctx, w.nq, e)
		}
		var gotLSE []float32
		for h := 0; h < hq; h++ {
			gotLSE = append(gotLSE, lse[h*total+row:h*total+row+w.nq]...)
		}
		if e := relL2(gotLSE, refLSE); !(e <= 1e-5) {
			t.Fatalf("ctx %d q %d: lse relative L2 error %g", w.ctx, w.nq, e)
		}
		row += w.nq
	}
}

func TestTwoTurnsWithAPrefixHitMatchTheReference(t *testing.T) {
	dense, err := bspa.NewDenseLayout(hq)
	must(t, err)
	defer dense.Close()
	layouts := map[string]struct {
		layout  *bspa.Layout
		allowed func(h, qb, kb int) bool
	}{
		"strided": {stridedLayout(t), stridedAllowed},
		"dense":   {dense, func(h, qb, kb int) bool { return kb <= qb }},
	}
	for name, l := range layouts {
		t.Run(name, func(t *testing.T) {
			conv := newConversation(rand.New(rand.NewSource(7)), 115)
			pool := newPool(t, 32)
			first, err := pool.NewSequence()
			must(t, err)
			must(t, first.Append(conv.tokens[:70]))
			stepAndCheck(t, pool, l.layout, []work{{first, conv, 0, 70}}, l.allowed)
			must(t, first.Commit(70))
			must(t, first.Close())
			second, err := pool.NewSequence()
			must(t, err)
			cached, err := second.Match(conv.tokens)
			must(t, err)
			if cached != 64 {
				t.Fatalf("cached %d, want 64", cached)
			}
			must(t, second.Append(conv.tokens[cached:]))
			stepAndCheck(t, pool, l.layout, []work{{second, conv, cached, 115 - cached}}, l.allowed)
			must(t, pool.Check())
		})
	}
}

func TestMixedBatchWithUnalignedContextAndDecode(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	a, b, c := newConversation(rng, 60), newConversation(rng, 50), newConversation(rng, 34)
	pool := newPool(t, 32)
	layout := stridedLayout(t)
	sa, _ := pool.NewSequence()
	sb, _ := pool.NewSequence()
	sc, err := pool.NewSequence()
	must(t, err)
	must(t, sa.Append(a.tokens))
	must(t, sc.Append(c.tokens[:33]))
	stepAndCheck(t, pool, layout, []work{{sa, a, 0, 37}, {sc, c, 0, 33}}, stridedAllowed)
	must(t, sa.Commit(37))
	must(t, sc.Commit(33))
	must(t, sb.Append(b.tokens))
	must(t, sc.Append(c.tokens[33:]))
	stepAndCheck(t, pool, layout, []work{{sa, a, 37, 23}, {sb, b, 0, 50}, {sc, c, 33, 1}}, stridedAllowed)
}

func TestConcurrentSequences(t *testing.T) {
	pool := newPool(t, 64)
	var wg sync.WaitGroup
	seqs := make([]*bspa.Sequence, 8)
	for i := range seqs {
		s, err := pool.NewSequence()
		must(t, err)
		seqs[i] = s
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for n := 0; n < 10; n++ {
				if err := seqs[i].Append([]int32{int32(i), int32(n), 3}); err != nil {
					t.Error(err)
				}
			}
		}(i)
	}
	wg.Wait()
	must(t, pool.Check())
	for _, s := range seqs {
		if info, _ := s.Info(); info.NumTokens != 30 {
			t.Fatalf("info %+v", info)
		}
	}
}
