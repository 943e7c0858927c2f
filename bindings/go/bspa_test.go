package bspa_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	bspa "github.com/bspa-project/bspa/bindings/go"
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

// step runs one batch (kv write then prefill) and returns out and lse.
func step(t *testing.T, pool *bspa.Pool, layout *bspa.Layout, items []work) (out, lse []float32) {
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
	out, lse = make([]float32, len(q)), make([]float32, hq*total)
	for i := range out {
		out[i] = float32(math.NaN()) // poisoned: unwritten rows fail
	}
	must(t, pool.PrefillF32(batch, 0, layout, q, out, scale, lse))
	return out, lse
}

// checkRows checks the rows of out and lse of a launch over items against the reference.
func checkRows(t *testing.T, out, lse []float32, items []work, allowed func(h, qb, kb int) bool) {
	t.Helper()
	total := len(lse) / hq
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
	if row != total {
		t.Fatalf("%d rows checked of %d", row, total)
	}
}

// stepAndCheck runs one batch (kv write then prefill) and checks every sequence's rows.
func stepAndCheck(t *testing.T, pool *bspa.Pool, layout *bspa.Layout, items []work, allowed func(h, qb, kb int) bool) {
	t.Helper()
	out, lse := step(t, pool, layout, items)
	checkRows(t, out, lse, items, allowed)
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

// ---- Bring-your-own cache: PrefillPaged, PrefillPagedF32, PrefillWorkspaceBytes ----

// ownPages are caller-owned host pages and the metadata of one launch over items.
type ownPages struct {
	k, v                                 []float32
	q                                    []float32
	blockTable, queryStarts, contextLens []int32
}

// newOwnPages scatters each item's K/V, positions [0, ctx+nq), into the pages tables[i] of
// numPages fresh pages. The other slots hold large values: reading one spoils the result.
func newOwnPages(rng *rand.Rand, numPages int, tables [][]int32, items []work) *ownPages {
	large := func(n int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(100 * rng.NormFloat64())
		}
		return out
	}
	o := &ownPages{k: large(numPages * hkv * page * dim), v: large(numPages * hkv * page * dim), queryStarts: []int32{0}}
	maxPages := 0
	for _, table := range tables {
		if len(table) > maxPages {
			maxPages = len(table)
		}
	}
	for i, w := range items {
		row := make([]int32, maxPages) // padded with page 0, never read
		copy(row, tables[i])
		o.blockTable = append(o.blockTable, row...)
		for pos := 0; pos < w.ctx+w.nq; pos++ {
			pg := int(row[pos/page])
			for h := 0; h < hkv; h++ {
				dst := ((pg*hkv+h)*page + pos%page) * dim
				src := (pos*hkv + h) * dim
				copy(o.k[dst:dst+dim], w.conv.k[src:src+dim])
				copy(o.v[dst:dst+dim], w.conv.v[src:src+dim])
			}
		}
		o.q = append(o.q, w.conv.q[w.ctx*hq*dim:(w.ctx+w.nq)*hq*dim]...)
		o.queryStarts = append(o.queryStarts, o.queryStarts[i]+int32(w.nq))
		o.contextLens = append(o.contextLens, int32(w.ctx))
	}
	return o
}

// args are PrefillPagedF32's arguments over the pages, with fresh poisoned out and lse.
func (o *ownPages) args(l *bspa.Layout) bspa.PagedArgsF32 {
	out, lse := make([]float32, len(o.q)), make([]float32, len(o.q)/dim)
	for i := range out {
		out[i] = float32(math.NaN())
	}
	for i := range lse {
		lse[i] = float32(math.NaN())
	}
	return bspa.PagedArgsF32{Q: o.q, Out: out, LSE: lse, KPages: o.k, VPages: o.v, NumKVHeads: hkv, PageSize: page,
		HeadDim: dim, BlockTable: o.blockTable, QueryStarts: o.queryStarts, ContextLens: o.contextLens, Layout: l,
		Scale: scale}
}

func TestPrefillPagedOverThePoolsPageIdsMatchesPrefill(t *testing.T) {
	// The Go binding exposes no view of a pool's storage: the pages here are the test's
	// own, laid out under the pool sequence's page ids.
	rng := rand.New(rand.NewSource(3))
	conv := newConversation(rng, 90)
	pool := newPool(t, 32)
	layout := stridedLayout(t)
	seq, err := pool.NewSequence()
	must(t, err)
	must(t, seq.Append(conv.tokens))
	step(t, pool, layout, []work{{seq, conv, 0, 41}})
	must(t, seq.Commit(41))
	items := []work{{seq, conv, 41, 49}}
	expected, expectedLSE := step(t, pool, layout, items)
	ids, err := seq.Pages()
	must(t, err)
	if len(ids) != 6 {
		t.Fatalf("%d pages for 90 tokens", len(ids))
	}
	own := newOwnPages(rng, 32, [][]int32{ids}, items)
	args := own.args(layout)
	must(t, bspa.PrefillPagedF32(args))
	if e := relL2(args.Out, float64s(expected)); !(e <= 1e-6) {
		t.Fatalf("out: relative L2 error %g against the pool's prefill", e)
	}
	if e := relL2(args.LSE, float64s(expectedLSE)); !(e <= 1e-6) {
		t.Fatalf("lse: relative L2 error %g against the pool's prefill", e)
	}
	checkRows(t, args.Out, args.LSE, items, stridedAllowed)

	// The Tensor form over the same memory.
	out := make([]float32, len(own.q))
	shape := []int64{49, hq, dim}
	pages := []int64{32, hkv, page, dim}
	must(t, bspa.PrefillPaged(bspa.PagedArgs{
		Q: bspa.HostF32(own.q, shape...), Out: bspa.HostF32(out, shape...),
		KPages: bspa.HostF32(own.k, pages...), VPages: bspa.HostF32(own.v, pages...),
		BlockTable: bspa.HostI32(own.blockTable, 1, 6), QueryStarts: bspa.HostI32(own.queryStarts, 2),
		ContextLens: bspa.HostI32(own.contextLens, 1), MaxQueryLen: 49, Layout: layout, Scale: scale,
	}, 0))
	if e := relL2(out, float64s(expected)); !(e <= 1e-6) {
		t.Fatalf("Tensor form: relative L2 error %g", e)
	}

	// MaxDecodeQueryLen routes rows between CUDA's kernels: the CPU's bytes do not move, and
	// a negative one is refused before the library is called.
	bounded := make([]float32, len(own.q))
	tensors := bspa.PagedArgs{
		Q: bspa.HostF32(own.q, shape...), Out: bspa.HostF32(bounded, shape...),
		KPages: bspa.HostF32(own.k, pages...), VPages: bspa.HostF32(own.v, pages...),
		BlockTable: bspa.HostI32(own.blockTable, 1, 6), QueryStarts: bspa.HostI32(own.queryStarts, 2),
		ContextLens: bspa.HostI32(own.contextLens, 1), MaxQueryLen: 49, Layout: layout, Scale: scale,
		MaxDecodeQueryLen: 1,
	}
	must(t, bspa.PrefillPaged(tensors, 0))
	for i := range out {
		if math.Float32bits(bounded[i]) != math.Float32bits(out[i]) {
			t.Fatalf("MaxDecodeQueryLen = 1 changed out[%d]: %g, was %g", i, bounded[i], out[i])
		}
	}
	tensors.MaxDecodeQueryLen = -1
	if err := bspa.PrefillPaged(tensors, 0); !errors.Is(err, bspa.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "MaxDecodeQueryLen = -1") {
		t.Fatalf("MaxDecodeQueryLen = -1: got %v", err)
	}
}

func float64s(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, e := range x {
		out[i] = float64(e)
	}
	return out
}

func TestPrefillPagedOverOwnPagesWithAShuffledBlockTableMatchesTheReference(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	// A chunk after an unaligned prefix, a whole prompt, a decode row.
	items := []work{
		{nil, newConversation(rng, 60), 37, 23},
		{nil, newConversation(rng, 50), 0, 50},
		{nil, newConversation(rng, 34), 33, 1},
	}
	const numPages = 16
	perm := rng.Perm(numPages)
	var tables [][]int32
	for _, w := range items {
		var table []int32
		for j := 0; j < (w.ctx+w.nq+page-1)/page; j++ {
			table, perm = append(table, int32(perm[0])), perm[1:]
		}
		tables = append(tables, table)
	}
	args := newOwnPages(rng, numPages, tables, items).args(stridedLayout(t))
	must(t, bspa.PrefillPagedF32(args))
	checkRows(t, args.Out, args.LSE, items, stridedAllowed)
}

func TestPrefillWorkspaceBytesOnCPUIsZero(t *testing.T) {
	for _, d := range []int{dim, 128} {
		if n, err := bspa.PrefillWorkspaceBytes(bspa.Device{Type: bspa.CPU}, d); err != nil || n != 0 {
			t.Fatalf("head_dim %d: %d bytes, %v", d, n, err)
		}
	}
	_, err := bspa.PrefillWorkspaceBytes(bspa.Device{Type: bspa.CPU}, 0)
	var e *bspa.Error
	if !errors.Is(err, bspa.ErrInvalidArgument) || !errors.As(err, &e) ||
		!strings.HasPrefix(e.Message, "bspa_prefill_workspace_bytes: ") || !strings.Contains(e.Message, "head_dim = 0") {
		t.Fatalf("head_dim 0: %v", err)
	}
	if n, _ := bspa.CUDADeviceCount(); n == 0 {
		if _, err := bspa.PrefillWorkspaceBytes(bspa.Device{Type: bspa.CUDA}, 128); !errors.Is(err, bspa.ErrNoDevice) {
			t.Fatalf("CUDA without a GPU: %v", err)
		}
	}
}

// alignedBytes is n bytes starting offset bytes past a 16-byte boundary.
func alignedBytes(n, offset int) []byte {
	raw := make([]byte, n+32)
	start := (16-int(uintptr(unsafe.Pointer(&raw[0]))%16))%16 + offset
	return raw[start : start+n]
}

func TestPrefillPagedWithACPUWorkspaceMatchesWithout(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	items := []work{{nil, newConversation(rng, 75), 45, 30}}
	own := newOwnPages(rng, 8, [][]int32{{6, 2, 7, 0, 5}}, items)
	layout := stridedLayout(t)
	expected := own.args(layout)
	must(t, bspa.PrefillPagedF32(expected))
	checkRows(t, expected.Out, expected.LSE, items, stridedAllowed)
	for _, ws := range [][]byte{alignedBytes(4096, 0), {}} {
		args := own.args(layout)
		args.Workspace = ws
		must(t, bspa.PrefillPagedF32(args))
		for i := range args.Out {
			if args.Out[i] != expected.Out[i] {
				t.Fatalf("workspace of %d bytes: out[%d] = %g, without %g", len(ws), i, args.Out[i], expected.Out[i])
			}
		}
	}
	// The workspace reaches the library: a misaligned one is refused.
	args := own.args(layout)
	args.Workspace = alignedBytes(4096, 1)
	if err := bspa.PrefillPagedF32(args); !errors.Is(err, bspa.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "workspace") || !strings.Contains(err.Error(), "16-byte aligned") {
		t.Fatalf("misaligned workspace: %v", err)
	}
}

func TestPrefillPagedErrorsCarryTheLibrarysMessage(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	layout, err := bspa.NewDenseLayout(hq)
	must(t, err)
	defer layout.Close()
	items := []work{{nil, newConversation(rng, 20), 0, 20}}
	own := newOwnPages(rng, 4, [][]int32{{0, 1}}, items)
	must(t, bspa.PrefillPagedF32(own.args(layout)))

	// A page id past the pages: checked by the library on the CPU.
	args := own.args(layout)
	args.BlockTable = []int32{0, 4}
	err = bspa.PrefillPagedF32(args)
	var e *bspa.Error
	if !errors.Is(err, bspa.ErrOutOfRange) || !errors.As(err, &e) || e.Status.Category() != 1 ||
		!strings.HasPrefix(e.Message, "bspa_prefill_paged: ") || !strings.Contains(e.Message, "block_table[0][1] = 4") ||
		!strings.HasPrefix(err.Error(), "BSPA_ERR_OUT_OF_RANGE: ") {
		t.Fatalf("page id 4 of 4 pages: %#v", err)
	}
	// q rows that no sequence owns.
	args = own.args(layout)
	args.QueryStarts = []int32{0, 19}
	if err := bspa.PrefillPagedF32(args); !errors.Is(err, bspa.ErrOutOfRange) ||
		!strings.Contains(err.Error(), "query_starts[1] = 19") {
		t.Fatalf("19 of 20 rows owned: %v", err)
	}
	// Slices that do not fit the shapes are refused before the call.
	args = own.args(layout)
	args.VPages = args.VPages[1:]
	if err := bspa.PrefillPagedF32(args); !errors.Is(err, bspa.ErrShapeMismatch) || !strings.Contains(err.Error(), "v_pages") {
		t.Fatalf("short v_pages: %v", err)
	}
	args.Layout = nil
	if err := bspa.PrefillPagedF32(args); !errors.Is(err, bspa.ErrNullPointer) {
		t.Fatalf("nil layout: %v", err)
	}

	// Tensors: mismatched K and V shapes; float metadata.
	shape := []int64{20, hq, dim}
	tensors := bspa.PagedArgs{
		Q: bspa.HostF32(own.q, shape...), Out: bspa.HostF32(make([]float32, len(own.q)), shape...),
		KPages: bspa.HostF32(own.k, 4, hkv, page, dim), VPages: bspa.HostF32(own.v, 2, hkv, page, 2*dim),
		BlockTable: bspa.HostI32(own.blockTable, 1, 2), QueryStarts: bspa.HostI32(own.queryStarts, 2),
		ContextLens: bspa.HostI32(own.contextLens, 1), MaxQueryLen: 20, Layout: layout, Scale: scale,
	}
	err = bspa.PrefillPaged(tensors, 0)
	if !errors.Is(err, bspa.ErrShapeMismatch) || !errors.As(err, &e) ||
		!strings.HasPrefix(e.Message, "bspa_prefill_paged: v_pages.shape = [2, 2, 16, 32]") {
		t.Fatalf("v_pages of another shape: %v", err)
	}
	tensors.VPages = bspa.HostF32(own.v, 4, hkv, page, dim)
	tensors.BlockTable = bspa.HostF32([]float32{0, 1}, 1, 2)
	if err := bspa.PrefillPaged(tensors, 0); !errors.Is(err, bspa.ErrDtypeMismatch) ||
		!strings.Contains(err.Error(), "block_table.dtype = float32") {
		t.Fatalf("float32 block_table: %v", err)
	}
}

func TestUnsafeWithKVF32ReadsWhatKVWriteWroteAndCloseWaits(t *testing.T) {
	pool := newPool(t, 4)
	tokens := make([]int32, 20)
	for i := range tokens {
		tokens[i] = int32(i)
	}
	k := make([]float32, 20*hkv*dim)
	for i := range k {
		k[i] = float32(i)
	}
	seq, err := pool.NewSequence()
	must(t, err)
	must(t, seq.Append(tokens))
	b, err := pool.NewBatch([]*bspa.Sequence{seq}, []int32{20}, 0)
	must(t, err)
	must(t, pool.KVWriteF32(b, 0, k, k))
	pages, err := seq.Pages()
	must(t, err)
	must(t, b.Close())

	inside, closed := make(chan struct{}), make(chan struct{})
	go func() { <-inside; pool.Close(); close(closed) }()
	err = pool.UnsafeWithKVF32(0, func(kk, vv []float32) error {
		close(inside)
		// Close runs concurrently now but must wait for this function to return.
		select {
		case <-closed:
			t.Error("Close returned while UnsafeWithKVF32's slices were in use")
		case <-time.After(100 * time.Millisecond):
		}
		// Token 17 is page 1, slot 1; head 1.
		at := ((int(pages[1])*hkv+1)*page + 1) * dim
		for i := 0; i < dim; i++ {
			if kk[at+i] != k[(17*hkv+1)*dim+i] || len(vv) != len(kk) {
				return fmt.Errorf("k[%d] = %v, want %v", at+i, kk[at+i], k[(17*hkv+1)*dim+i])
			}
		}
		return nil
	})
	must(t, err)
	<-closed
	if err := pool.ReadKVF32(0, k, k); !errors.Is(err, bspa.ErrClosed) {
		t.Fatalf("ReadKVF32 on a closed pool: %v, want ErrClosed", err)
	}
	if err := pool.UnsafeWithKVF32(0, func(k, v []float32) error { return nil }); !errors.Is(err, bspa.ErrClosed) {
		t.Fatalf("UnsafeWithKVF32 on a closed pool: %v, want ErrClosed", err)
	}
}

func TestCategorySentinelsMatchEveryStatusOfTheirCategory(t *testing.T) {
	shape := &bspa.Error{Status: bspa.StatusShapeMismatch, Message: "q has 3 elements"}
	for _, c := range []struct {
		err    error
		target error
		want   bool
	}{
		{shape, bspa.ErrInvalidArgument, true},
		{shape, bspa.ErrShapeMismatch, true},
		{shape, bspa.ErrDtypeMismatch, false},
		{shape, bspa.ErrNotSupported, false},
		{&bspa.Error{Status: bspa.StatusNoDevice}, bspa.ErrNotSupported, true},
		{&bspa.Error{Status: bspa.StatusOutOfMemory}, bspa.ErrResource, true},
		{&bspa.Error{Status: bspa.StatusOutOfMemory}, bspa.ErrOutOfPages, false},
		{&bspa.Error{Status: bspa.StatusOutOfPages}, bspa.ErrResource, true},
		{&bspa.Error{Status: bspa.StatusCUDA}, bspa.ErrResource, false},
		{fmt.Errorf("wrapped: %w", shape), bspa.ErrInvalidArgument, true},
	} {
		if got := errors.Is(c.err, c.target); got != c.want {
			t.Errorf("errors.Is(%v, %v) = %v, want %v", c.err, c.target, got, c.want)
		}
	}
	// A real one from the library: a shape mismatch found by the C side.
	pool := newPool(t, 4)
	seq, err := pool.NewSequence()
	must(t, err)
	must(t, seq.Append(make([]int32, 4)))
	b, err := pool.NewBatch([]*bspa.Sequence{seq}, []int32{4}, 0)
	must(t, err)
	defer b.Close()
	k := make([]float32, 3*hkv*dim)
	err = pool.KVWrite(b, 0, bspa.HostF32(k, 3, hkv, dim), bspa.HostF32(k, 3, hkv, dim), 0)
	if !errors.Is(err, bspa.ErrShapeMismatch) || !errors.Is(err, bspa.ErrInvalidArgument) {
		t.Fatalf("KVWrite of 3 rows for 4 tokens: %v, want a shape mismatch that is an invalid argument", err)
	}
}

func TestZeroPoolOptionsAreUsable(t *testing.T) {
	pool, err := bspa.NewPool(bspa.PoolOptions{})
	must(t, err)
	defer pool.Close()
	o := pool.Options()
	if o.Device.Type != bspa.CPU || o.DType != bspa.F32 || o.NumLayers != 1 || o.PageSize != 64 ||
		o.MemoryBytes != bspa.DefaultMemoryBytes {
		t.Fatalf("zero options became %+v", o)
	}
	st, err := pool.Stats()
	must(t, err)
	// One layer, one kv head, head_dim 128, page 64, f32: 64 KiB of K and V per page.
	if want := int64(bspa.DefaultMemoryBytes / (2 * 64 * 128 * 4)); st.PagesTotal != want {
		t.Fatalf("%d pages from the default budget, want %d", st.PagesTotal, want)
	}
	if d := bspa.DefaultPoolOptions(); d.DType != bspa.F32 || d.Device.Type != bspa.CPU {
		t.Fatalf("DefaultPoolOptions: %+v", d)
	}
	if c := bspa.CUDAPoolOptions(1); c.DType != bspa.BF16 || c.Device != (bspa.Device{Type: bspa.CUDA, ID: 1}) {
		t.Fatalf("CUDAPoolOptions: %+v", c)
	}
	noKV, err := bspa.NewPool(bspa.PoolOptions{BookkeepingOnly: true, NumPages: 8})
	must(t, err)
	defer noKV.Close()
	if err := noKV.UnsafeWithKVF32(0, func(k, v []float32) error { return nil }); !errors.Is(err, bspa.ErrInvalidState) {
		t.Fatalf("UnsafeWithKVF32 on a pool without storage: %v, want ErrInvalidState", err)
	}
}
