package bspa

import (
	"errors"
	"testing"
)

// A batch closed with one of its sequences frees its C handle, and the next batch may be
// given the same address. The old Batch's Close (idempotent, also run by its finalizer)
// must then leave the new batch alone, and the old Batch must not reach it. An internal
// test: it looks at the C address to make the reuse happen.
func TestStaleBatchNeverReachesABatchAtItsOldAddress(t *testing.T) {
	pool, err := NewPool(PoolOptions{NumKVHeads: 1, HeadDim: 8, PageSize: 16, NumPages: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s1, err := pool.NewSequence()
	must(t, err)
	s2, err := pool.NewSequence()
	must(t, err)
	must(t, s1.Append(make([]int32, 4)))
	must(t, s2.Append(make([]int32, 4)))
	b1, err := pool.NewBatch([]*Sequence{s1}, []int32{4}, 0)
	must(t, err)
	old := b1.b
	must(t, s1.Close()) // closes b1's C batch; b1 keeps the address
	var b2 *Batch
	for i := 0; i < 100 && b2 == nil; i++ {
		b, err := pool.NewBatch([]*Sequence{s2}, []int32{4}, 0)
		must(t, err)
		if b.b == old {
			b2 = b
		} else {
			defer b.Close()
		}
	}
	if b2 == nil {
		t.Skip("the allocator did not hand out the old address again")
	}
	k := make([]float32, 4*8)
	if err := pool.KVWriteF32(b1, 0, k, k); !errors.Is(err, ErrClosed) {
		t.Fatalf("a write through the closed batch: %v, want ErrClosed", err)
	}
	must(t, b1.Close())
	if err := pool.KVWriteF32(b2, 0, k, k); err != nil {
		t.Fatalf("the new batch at the old address after the old Batch's Close: %v", err)
	}
	must(t, b2.Close())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
