package bspa

/*
#include <bspa/bspa.h>
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// WithKVF32 calls f with one layer's K and V storage of a float32 CPU pool as slices,
// [num_pages, num_kv_heads, page_size, head_dim] row-major.
//
// The slices alias the pool's C memory, which the Go collector does not track, so they
// are valid only inside f: the pool is held open while f runs (a concurrent Close waits
// for f to return), and f must neither keep the slices nor call the pool's methods (the
// pool's lock is held). Copy what must outlive f. Reading races with concurrent
// KVWrite calls (docs/design.md, "Lifetimes in the bindings").
func (p *Pool) WithKVF32(layer int, f func(k, v []float32) error) error {
	if err := p.checkHostF32("WithKVF32"); err != nil {
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
			return argError(StatusInternal, fmt.Sprintf("WithKVF32: a layer of %d elements", n))
		}
		ks := unsafe.Slice((*float32)(k.data), int(n))
		vs := unsafe.Slice((*float32)(v.data), int(n))
		return f(ks, vs)
	})
}
