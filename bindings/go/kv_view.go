package bspa

/*
#include <bspa/bspa.h>
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// ReadKVF32 copies one layer's K and V storage of a float32 CPU pool,
// [num_pages, num_kv_heads, page_size, head_dim] row-major, into k and v (each of exactly
// that many elements: ErrShapeMismatch otherwise). The copies are the caller's: the safe
// way to look at the pool's pages. Reading races with concurrent KVWrite calls.
func (p *Pool) ReadKVF32(layer int, k, v []float32) error {
	return p.UnsafeWithKVF32(layer, func(ks, vs []float32) error {
		if len(k) != len(ks) || len(v) != len(vs) {
			return argError(StatusShapeMismatch, fmt.Sprintf("ReadKVF32: k and v have %d and %d elements, the layer %d",
				len(k), len(v), len(ks)))
		}
		copy(k, ks)
		copy(v, vs)
		return nil
	})
}

// UnsafeWithKVF32 calls f with one layer's K and V storage of a float32 CPU pool as
// slices, [num_pages, num_kv_heads, page_size, head_dim] row-major, without a copy.
//
// Unsafe as package unsafe is: the slices alias the pool's C memory, which the Go
// collector does not track, so they are valid only inside f, and nothing stops f from
// keeping them (a slice kept and used after the pool's Close reads freed memory). The pool
// is held open while f runs (a concurrent Close waits for f to return); f must neither
// keep the slices nor call the pool's methods (the pool's lock is held). ReadKVF32 is the
// safe copy. Reading races with concurrent KVWrite calls (docs/design.md, "Lifetimes in
// the bindings").
func (p *Pool) UnsafeWithKVF32(layer int, f func(k, v []float32) error) error {
	if err := p.checkHostF32("UnsafeWithKVF32"); err != nil {
		return err
	}
	return p.use(func() error {
		var k, v C.DLTensor
		if err := call(func() C.bspa_status { return C.bspa_pool_kv(p.p, C.int32_t(layer), &k, &v) }); err != nil {
			return err
		}
		shape := unsafe.Slice((*int64)(unsafe.Pointer(k.shape)), int(k.ndim))
		n := int64(1)
		for _, s := range shape {
			n *= s
		}
		if n <= 0 || n > int64(^uint(0)>>1) {
			return argError(StatusInternal, fmt.Sprintf("UnsafeWithKVF32: a layer of %d elements", n))
		}
		ks := unsafe.Slice((*float32)(k.data), int(n))
		vs := unsafe.Slice((*float32)(v.data), int(n))
		return f(ks, vs)
	})
}
