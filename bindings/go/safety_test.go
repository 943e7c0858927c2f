package bspa_test

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	bspa "github.com/bspa-project/bspa/bindings/go"
)

func seq32(n, off int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i + off)
	}
	return out
}

// A Tensor of HostF32 whose exported Shape is edited past its slice is refused, not written
// past the slice (before: 128 float32s past `out`).
func TestAnEditedHostTensorCannotReachPastItsSlice(t *testing.T) {
	heads, dim, T := 2, 8, 16
	pool, err := bspa.NewPool(bspa.PoolOptions{NumKVHeads: heads, HeadDim: dim, PageSize: 16, NumPages: 8})
	must(t, err)
	defer pool.Close()
	s, err := pool.NewSequence()
	must(t, err)
	must(t, s.Append(seq32(T, 0)))
	b, err := pool.NewBatch([]*bspa.Sequence{s}, []int32{int32(T)}, 0)
	must(t, err)
	k := make([]float32, T*heads*dim)
	must(t, pool.KVWriteF32(b, 0, k, k))
	layout, err := bspa.NewDenseLayout(heads)
	must(t, err)
	defer layout.Close()
	backing := make([]float32, 2*T*heads*dim) // out's neighbour lives in its second half
	small := backing[:T/2*heads*dim]
	out := bspa.HostF32(small, int64(T/2), int64(heads), int64(dim))
	out.Shape[0] = int64(T) // the batch's rows: twice the slice
	q := bspa.HostF32(make([]float32, T*heads*dim), int64(T), int64(heads), int64(dim))
	if err := pool.Prefill(b, 0, layout, q, out, 0.5, nil, 0); !errors.Is(err, bspa.ErrShapeMismatch) {
		t.Fatalf("an edited out: %v, want ErrShapeMismatch", err)
	}
	out.Shape[0], out.Strides = int64(T/2), []int64{int64(2 * heads * dim), int64(dim), 1} // strides past it too
	if err := pool.Prefill(b, 0, layout, q, out, 0.5, nil, 0); !errors.Is(err, bspa.ErrShapeMismatch) {
		t.Fatalf("edited strides: %v, want ErrShapeMismatch", err)
	}
	for _, x := range backing[len(small):] {
		if x != 0 {
			t.Fatalf("memory past the slice was written")
		}
	}
}

// One call at a time per batch: a Plan from another goroutine waits for a running launch
// instead of freeing the plan it reads (before: SIGSEGV).
func TestPlanAndLaunchOfOneBatchFromTwoGoroutines(t *testing.T) {
	tokens, heads, dim := 2048, 8, 64
	pool, err := bspa.NewPool(bspa.PoolOptions{NumKVHeads: heads, HeadDim: dim, PageSize: 64, NumPages: int64(2*tokens/64 + 2)})
	must(t, err)
	defer pool.Close()
	a, err := pool.NewSequence()
	must(t, err)
	b, err := pool.NewSequence()
	must(t, err)
	must(t, a.Append(seq32(tokens, 0)))
	must(t, b.Append(seq32(tokens, 7)))
	batch, err := pool.NewReusableBatch(bspa.BatchOptions{MaxSeqs: 4, MaxTokens: int64(tokens), MaxSeqTokens: int64(4 * tokens)})
	must(t, err)
	must(t, batch.Plan([]*bspa.Sequence{a}, []int32{int32(tokens)}, 0))
	k := make([]float32, tokens*heads*dim)
	must(t, pool.KVWriteF32(batch, 0, k, k))
	layout, err := bspa.NewDenseLayout(heads)
	must(t, err)
	defer layout.Close()
	q := make([]float32, tokens*heads*dim)
	out := make([]float32, len(q))
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := 0; i < 3; i++ {
			if err := pool.PrefillF32(batch, 0, layout, q, out, 0.125, nil); err != nil {
				t.Errorf("prefill %d: %v", i, err)
			}
		}
	}()
	for i := 0; ; i++ { // re-plan until the launches are done
		select {
		case <-done:
			wg.Wait()
			must(t, pool.Check())
			return
		default:
		}
		s := []*bspa.Sequence{a}
		if i%2 == 1 {
			s = []*bspa.Sequence{b}
		}
		must(t, batch.Plan(s, []int32{int32(tokens)}, 0))
	}
}

// A KVExport dropped without Close is finalized (its pins released): the pool no longer
// keeps it reachable (before: its pages stayed pinned for the pool's life).
func TestAnAbandonedExportIsFinalized(t *testing.T) {
	pool, err := bspa.NewPool(bspa.PoolOptions{BookkeepingOnly: true, PageSize: 16, NumPages: 64})
	must(t, err)
	defer pool.Close()
	s, err := pool.NewSequence()
	must(t, err)
	must(t, s.Append(seq32(64, 0)))
	must(t, s.Commit(64))
	must(t, s.Close())
	func() {
		x, err := pool.ExportKV(seq32(64, 0), bspa.SequenceOptions{})
		must(t, err)
		if len(x.Pages) != 4 {
			t.Fatalf("%d pages exported, want 4", len(x.Pages))
		}
	}()
	for i := 0; i < 50; i++ {
		runtime.GC()
		time.Sleep(2 * time.Millisecond)
		st, err := pool.Stats()
		must(t, err)
		if st.PagesInUse == 0 {
			return
		}
	}
	t.Fatalf("the abandoned export's pages are still pinned after 50 GCs")
}
