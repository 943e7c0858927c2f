package bspa

/*
#include <bspa/bspa.h>

// desc, per tensor: device type, device id, dtype code, dtype bits, ndim, has strides,
// shape[ndim], strides[ndim] if it has them. The DLTensors live on this stack frame and
// point into Go memory only for the duration of the call, as cgo allows.
static const int64_t *go_fill(DLTensor *t, void *data, const int64_t *d) {
  t->data = data;
  t->device.device_type = (DLDeviceType)d[0];
  t->device.device_id = (int)d[1];
  t->dtype.code = (uint8_t)d[2];
  t->dtype.bits = (uint8_t)d[3];
  t->dtype.lanes = 1;
  t->ndim = (int)d[4];
  int has_strides = (int)d[5];
  d += 6;
  t->shape = (int64_t *)d;
  d += t->ndim;
  t->strides = has_strides ? (int64_t *)d : NULL;
  if (has_strides) d += t->ndim;
  t->byte_offset = 0;
  return d;
}

static bspa_status go_kv_write(bspa_pool *pool, const bspa_batch *batch, int32_t layer, void *k, void *v,
                               const int64_t *desc, uintptr_t stream) {
  DLTensor tk, tv;
  desc = go_fill(&tk, k, desc);
  go_fill(&tv, v, desc);
  return bspa_kv_write(pool, batch, layer, &tk, &tv, (bspa_stream)stream);
}

static bspa_status go_prefill(bspa_pool *pool, const bspa_batch *batch, int32_t layer, const bspa_layout *layout,
                              void *q, void *out, void *lse, int has_lse, const int64_t *desc, float scale,
                              uintptr_t stream) {
  DLTensor tq, tout, tlse;
  desc = go_fill(&tq, q, desc);
  desc = go_fill(&tout, out, desc);
  if (has_lse) go_fill(&tlse, lse, desc);
  return bspa_prefill(pool, batch, layer, layout, &tq, &tout, scale, has_lse ? &tlse : NULL, (bspa_stream)stream);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Stream is a cudaStream_t; 0 is the default stream. CPU work ignores it.
type Stream uintptr

// Tensor describes memory the library reads or writes during one call (a DLTensor).
// Data is host memory (a Go slice's first element, C memory) or a device address.
// Strides are in elements; nil means compact row-major.
type Tensor struct {
	Data    unsafe.Pointer
	Device  Device
	DType   DType
	Shape   []int64
	Strides []int64
}

// HostF32 describes a float32 slice of the given shape; it panics when the slice's
// length is not the shape's product.
func HostF32(data []float32, shape ...int64) Tensor {
	checkLen(len(data), shape)
	return Tensor{Data: unsafe.Pointer(&data[0]), Device: Device{Type: CPU}, DType: F32, Shape: shape}
}

// Host16 describes a slice of 16-bit values (dtype F16 or BF16, as bits).
func Host16(data []uint16, dtype DType, shape ...int64) Tensor {
	checkLen(len(data), shape)
	return Tensor{Data: unsafe.Pointer(&data[0]), Device: Device{Type: CPU}, DType: dtype, Shape: shape}
}

func checkLen(n int, shape []int64) {
	want := int64(1)
	for _, s := range shape {
		want *= s
	}
	if int64(n) != want || n == 0 {
		panic(fmt.Sprintf("bspa: a slice of %d elements for shape %v", n, shape))
	}
}

func (t *Tensor) appendDesc(desc []int64) []int64 {
	code, bits := int64(C.kDLFloat), int64(32)
	switch t.DType {
	case F16:
		bits = 16
	case BF16:
		code, bits = int64(C.kDLBfloat), 16
	}
	hasStrides := int64(0)
	if t.Strides != nil {
		hasStrides = 1
	}
	desc = append(desc, int64(t.Device.Type), int64(t.Device.ID), code, bits, int64(len(t.Shape)), hasStrides)
	desc = append(desc, t.Shape...)
	return append(desc, t.Strides...)
}

// KVWrite writes the batch's new K and V, [T_new, num_kv_heads, head_dim] of the pool's
// dtype on its device, into their pages of `layer`, on `stream`.
//
// The tensors' memory must be valid for their shapes, and stay alive until the launch
// completes on the stream: the library cannot check either.
func (p *Pool) KVWrite(b *Batch, layer int, k, v Tensor, stream Stream) error {
	if b.pool != p {
		return argError(StatusInvalidArgument, "a batch of another pool")
	}
	desc := v.appendDesc(k.appendDesc(nil))
	return b.use(func() error {
		return call(func() C.bspa_status {
			return C.go_kv_write(p.p, b.b, C.int32_t(layer), k.Data, v.Data, (*C.int64_t)(unsafe.Pointer(&desc[0])),
				C.uintptr_t(stream))
		})
	})
}

// Prefill runs block-sparse causal attention of the batch's new tokens over their
// cached prefix and themselves: q and out [T_new, Hq, head_dim], lse (optional)
// [Hq, T_new] float32. Memory rules as for KVWrite.
func (p *Pool) Prefill(b *Batch, layer int, l *Layout, q, out Tensor, scale float32, lse *Tensor, stream Stream) error {
	if b.pool != p {
		return argError(StatusInvalidArgument, "a batch of another pool")
	}
	desc := out.appendDesc(q.appendDesc(nil))
	var lseData unsafe.Pointer
	hasLSE := C.int(0)
	if lse != nil {
		desc = lse.appendDesc(desc)
		lseData, hasLSE = lse.Data, 1
	}
	return b.use(func() error {
		return l.use(func() error {
			return call(func() C.bspa_status {
				return C.go_prefill(p.p, b.b, C.int32_t(layer), l.l, q.Data, out.Data, lseData, hasLSE,
					(*C.int64_t)(unsafe.Pointer(&desc[0])), C.float(scale), C.uintptr_t(stream))
			})
		})
	})
}

func (p *Pool) checkHostF32(what string) error {
	if p.opts.Device.Type != CPU {
		return argError(StatusDeviceMismatch, what+": host slices need a CPU pool; use the Tensor launches")
	}
	if p.opts.DType != F32 {
		return argError(StatusDtypeMismatch, what+": float32 slices need an F32 pool")
	}
	return nil
}

func checkRows(what string, n, rows, heads, dim int) error {
	if n != rows*heads*dim || n == 0 {
		return argError(StatusShapeMismatch,
			fmt.Sprintf("%s has %d elements, expected [%d, %d, %d] = %d", what, n, rows, heads, dim, rows*heads*dim))
	}
	return nil
}

// KVWriteF32 is KVWrite for a float32 CPU pool, from row-major slices
// [T_new, num_kv_heads, head_dim].
func (p *Pool) KVWriteF32(b *Batch, layer int, k, v []float32) error {
	if err := p.checkHostF32("KVWriteF32"); err != nil {
		return err
	}
	rows, heads, dim := b.numTokens, p.opts.NumKVHeads, p.opts.HeadDim
	if err := checkRows("k", len(k), rows, heads, dim); err != nil {
		return err
	}
	if err := checkRows("v", len(v), rows, heads, dim); err != nil {
		return err
	}
	shape := []int64{int64(rows), int64(heads), int64(dim)}
	return p.KVWrite(b, layer, HostF32(k, shape...), HostF32(v, shape...), 0)
}

// PrefillF32 is Prefill for a float32 CPU pool: q and out [T_new, Hq, head_dim] with
// Hq = l.NumHeads(); lse [Hq, T_new] or nil.
func (p *Pool) PrefillF32(b *Batch, layer int, l *Layout, q, out []float32, scale float32, lse []float32) error {
	if err := p.checkHostF32("PrefillF32"); err != nil {
		return err
	}
	rows, heads, dim := b.numTokens, l.NumHeads(), p.opts.HeadDim
	if err := checkRows("q", len(q), rows, heads, dim); err != nil {
		return err
	}
	if err := checkRows("out", len(out), rows, heads, dim); err != nil {
		return err
	}
	shape := []int64{int64(rows), int64(heads), int64(dim)}
	var lseTensor *Tensor
	if lse != nil {
		if err := checkRows("lse", len(lse), heads, rows, 1); err != nil {
			return err
		}
		t := HostF32(lse, int64(heads), int64(rows))
		lseTensor = &t
	}
	return p.Prefill(b, layer, l, HostF32(q, shape...), HostF32(out, shape...), scale, lseTensor, 0)
}
