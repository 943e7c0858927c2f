package bspa

/*
#include <bspa/bspa.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// StridedOptions configure NewStridedLayout: Phi-3-small's local + vertical-stride rule
//
//	allowed(h, qb, kb) = kb <= qb && (qb-kb < LocalBlocks || (kb + g*s + 1) % VertStride == 0)
//
// with g = HeadBegin + h and s = HomoHead ? 0 : max(1, VertStride / NumHeadsTotal).
type StridedOptions struct {
	BlockSize, LocalBlocks, VertStride int
	HomoHead                           bool
	NumHeadsTotal, HeadBegin, NumHeads int
}

// DefaultStridedOptions are Phi-3-small's: block 64, 16 local blocks, stride 8, 32 heads.
func DefaultStridedOptions() StridedOptions {
	var o C.bspa_layout_strided_options
	C.bspa_layout_strided_options_init(&o)
	return StridedOptions{
		BlockSize: int(o.block_size), LocalBlocks: int(o.local_blocks), VertStride: int(o.vert_stride),
		HomoHead: o.homo_head != 0, NumHeadsTotal: int(o.num_heads_total), HeadBegin: int(o.head_begin),
		NumHeads: int(o.num_heads),
	}
}

// Layout says which key blocks each query block of each head may see. Immutable: safe
// for concurrent use.
type Layout struct {
	mu       sync.RWMutex // guards the handle against Close during a call
	l        *C.bspa_layout
	numHeads int
}

func newLayout(l *C.bspa_layout, numHeads int) *Layout {
	layout := &Layout{l: l, numHeads: numHeads}
	runtime.SetFinalizer(layout, (*Layout).Close)
	return layout
}

// NewStridedLayout makes a local + vertical-stride layout.
func NewStridedLayout(opts StridedOptions) (*Layout, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var o C.bspa_layout_strided_options
	if err := call(func() C.bspa_status { return C.bspa_layout_strided_options_init(&o) }); err != nil {
		return nil, err
	}
	o.block_size = C.int32_t(opts.BlockSize)
	o.local_blocks = C.int32_t(opts.LocalBlocks)
	o.vert_stride = C.int32_t(opts.VertStride)
	if opts.HomoHead {
		o.homo_head = 1
	}
	o.num_heads_total = C.int32_t(opts.NumHeadsTotal)
	o.head_begin = C.int32_t(opts.HeadBegin)
	o.num_heads = C.int32_t(opts.NumHeads)
	var l *C.bspa_layout
	if err := call(func() C.bspa_status { return C.bspa_layout_create_strided(&l, &o) }); err != nil {
		return nil, err
	}
	return newLayout(l, opts.NumHeads), nil
}

// NewDenseLayout makes a dense causal layout over numHeads heads.
func NewDenseLayout(numHeads int) (*Layout, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var l *C.bspa_layout
	if err := call(func() C.bspa_status { return C.bspa_layout_create_dense(&l, C.int32_t(numHeads)) }); err != nil {
		return nil, err
	}
	return newLayout(l, numHeads), nil
}

// NewCSRLayout makes a caller's own layout: crow is [numHeads][numBlockRows+1] absolute
// offsets into col (key blocks, ascending per row, the diagonal included).
func NewCSRLayout(numHeads, blockSize, numBlockRows int, crow, col []int32) (*Layout, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	if numHeads < 1 || numBlockRows < 0 || len(crow) != numHeads*(numBlockRows+1) {
		return nil, argError(StatusInvalidArgument, fmt.Sprintf(
			"crow has %d entries, expected numHeads * (numBlockRows + 1) = %d * %d", len(crow), numHeads, numBlockRows+1))
	}
	for _, c := range crow {
		if c < 0 || int(c) > len(col) {
			return nil, argError(StatusInvalidArgument, fmt.Sprintf("crow entry %d lies outside col (length %d)", c, len(col)))
		}
	}
	var colPtr *C.int32_t
	if len(col) > 0 {
		colPtr = (*C.int32_t)(unsafe.Pointer(&col[0]))
	}
	var l *C.bspa_layout
	err := call(func() C.bspa_status {
		return C.bspa_layout_create_csr(&l, C.int32_t(numHeads), C.int32_t(blockSize), C.int32_t(numBlockRows),
			(*C.int32_t)(unsafe.Pointer(&crow[0])), colPtr)
	})
	if err != nil {
		return nil, err
	}
	return newLayout(l, numHeads), nil
}

// NumHeads is the number of (local) query heads the layout covers.
func (l *Layout) NumHeads() int { return l.numHeads }

func (l *Layout) use(f func() error) error {
	defer runtime.KeepAlive(l)
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.l == nil {
		return ErrClosed
	}
	return f()
}

// Allowed reports whether query block qBlock of local head `head` may see key block kBlock.
func (l *Layout) Allowed(head int, qBlock, kBlock int64) (bool, error) {
	var allowed C.int32_t
	err := l.use(func() error {
		return call(func() C.bspa_status {
			return C.bspa_layout_allowed(l.l, C.int32_t(head), C.int64_t(qBlock), C.int64_t(kBlock), &allowed)
		})
	})
	return allowed != 0, err
}

// Close destroys the layout. Idempotent.
func (l *Layout) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.l != nil {
		C.bspa_layout_destroy(l.l)
		l.l = nil
	}
	runtime.SetFinalizer(l, nil)
	return nil
}
