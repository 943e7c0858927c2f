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
  bspa_kv_write_args args;
  bspa_status status = bspa_kv_write_args_init(&args);
  if (status != BSPA_OK) return status;
  args.layer = layer;
  args.k_new = &tk;
  args.v_new = &tv;
  return bspa_kv_write(pool, batch, &args, (bspa_stream)stream);
}

static bspa_status go_prefill(bspa_pool *pool, const bspa_batch *batch, int32_t layer, const bspa_layout *layout,
                              void *q, void *out, void *lse, int has_lse, const int64_t *desc, float scale,
                              uintptr_t stream) {
  DLTensor tq, tout, tlse;
  desc = go_fill(&tq, q, desc);
  desc = go_fill(&tout, out, desc);
  if (has_lse) go_fill(&tlse, lse, desc);
  bspa_prefill_args args;
  bspa_status status = bspa_prefill_args_init(&args);
  if (status != BSPA_OK) return status;
  args.layer = layer;
  args.layout = layout;
  args.q = &tq;
  args.out = &tout;
  args.lse = has_lse ? &tlse : NULL;
  args.scale = scale;
  return bspa_prefill(pool, batch, &args, (bspa_stream)stream);
}

// desc: q, out, k_pages, v_pages, block_table, query_starts, context_lens, then lse,
// workspace and the two scales where given.
static bspa_status go_prefill_paged(void *q, void *out, void *k, void *v, void *block_table, void *query_starts,
                                    void *context_lens, void *lse, int has_lse, void *workspace, int has_workspace,
                                    void *k_scale, void *v_scale, int has_scales,
                                    const int64_t *desc, int32_t max_query_len, int32_t max_decode_query_len,
                                    const bspa_layout *layout, float scale, uintptr_t stream) {
  DLTensor tq, tout, tk, tv, tbt, tqs, tcl, tlse, tws, tks, tvs;
  desc = go_fill(&tq, q, desc);
  desc = go_fill(&tout, out, desc);
  desc = go_fill(&tk, k, desc);
  desc = go_fill(&tv, v, desc);
  desc = go_fill(&tbt, block_table, desc);
  desc = go_fill(&tqs, query_starts, desc);
  desc = go_fill(&tcl, context_lens, desc);
  if (has_lse) desc = go_fill(&tlse, lse, desc);
  if (has_workspace) desc = go_fill(&tws, workspace, desc);
  if (has_scales) {
    desc = go_fill(&tks, k_scale, desc);
    go_fill(&tvs, v_scale, desc);
  }
  bspa_paged_args args;
  bspa_status status = bspa_paged_args_init(&args);
  if (status != BSPA_OK) return status;
  args.q = &tq;
  args.out = &tout;
  args.lse = has_lse ? &tlse : NULL;
  args.k_pages = &tk;
  args.v_pages = &tv;
  args.block_table = &tbt;
  args.query_starts = &tqs;
  args.context_lens = &tcl;
  args.max_query_len = max_query_len;
  args.max_decode_query_len = max_decode_query_len;
  args.layout = layout;
  args.scale = scale;
  args.workspace = has_workspace ? &tws : NULL;
  args.k_scale = has_scales ? &tks : NULL;
  args.v_scale = has_scales ? &tvs : NULL;
  return bspa_prefill_paged(&args, (bspa_stream)stream);
}
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"
)

// Stream is a cudaStream_t; 0 is the default stream. CPU work ignores it.
type Stream uintptr

// Tensor describes memory the library reads or writes during one call (a DLTensor).
// Data is host memory (a Go slice's first element, C memory) or a device address.
// Strides are in elements; nil means compact row-major. A Tensor made by a Host*
// constructor remembers its slice's size: a launch refuses it (ErrShapeMismatch) when
// Shape, Strides or DType, edited since, reach past the slice.
type Tensor struct {
	Data    unsafe.Pointer
	Device  Device
	DType   DType
	Shape   []int64
	Strides []int64
	// hostBytes: the Host* constructor's slice in bytes; 0 for memory the caller vouches for.
	hostBytes int64
}

// HostF32 describes a float32 slice of the given shape; it panics when the slice's
// length is not the shape's product.
func HostF32(data []float32, shape ...int64) Tensor {
	checkLen(len(data), shape)
	return Tensor{Data: unsafe.Pointer(&data[0]), Device: Device{Type: CPU}, DType: F32, Shape: shape,
		hostBytes: 4 * int64(len(data))}
}

// Host16 describes a slice of 16-bit values (dtype F16 or BF16, as bits).
func Host16(data []uint16, dtype DType, shape ...int64) Tensor {
	checkLen(len(data), shape)
	return Tensor{Data: unsafe.Pointer(&data[0]), Device: Device{Type: CPU}, DType: dtype, Shape: shape,
		hostBytes: 2 * int64(len(data))}
}

// HostI32 describes an int32 slice (PrefillPaged's metadata); it panics like HostF32.
func HostI32(data []int32, shape ...int64) Tensor {
	checkLen(len(data), shape)
	return Tensor{Data: unsafe.Pointer(&data[0]), Device: Device{Type: CPU}, DType: I32, Shape: shape,
		hostBytes: 4 * int64(len(data))}
}

// HostFP8 describes e4m3 bytes (PrefillPaged's FP8 pages); it panics like HostF32.
func HostFP8(data []byte, shape ...int64) Tensor {
	checkLen(len(data), shape)
	return Tensor{Data: unsafe.Pointer(&data[0]), Device: Device{Type: CPU}, DType: FP8E4M3, Shape: shape,
		hostBytes: int64(len(data))}
}

// HostU8 describes a byte slice (PrefillPaged's workspace); it panics like HostF32.
func HostU8(data []byte, shape ...int64) Tensor {
	checkLen(len(data), shape)
	return Tensor{Data: unsafe.Pointer(&data[0]), Device: Device{Type: CPU}, DType: U8, Shape: shape,
		hostBytes: int64(len(data))}
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

// dlpackType is a DType's DLPack type code and bits.
func dlpackType(d DType) (code, bits int64) {
	code, bits = int64(C.kDLFloat), 32
	switch d {
	case F16:
		bits = 16
	case BF16:
		code, bits = int64(C.kDLBfloat), 16
	case I32:
		code = int64(C.kDLInt)
	case U8:
		code, bits = int64(C.kDLUInt), 8
	case FP8E4M3:
		code, bits = int64(C.BSPA_DL_FLOAT8_E4M3FN), 8
	}
	return code, bits
}

// checkHostExtents: every Tensor of a Host* constructor must still describe only its slice
// (its exported fields may have been edited), or the library would read or write past it.
func checkHostExtents(ts ...*Tensor) error {
	for _, t := range ts {
		if t == nil || t.hostBytes == 0 {
			continue
		}
		last, stride, ok := int64(0), int64(1), true
		for i := len(t.Shape) - 1; i >= 0 && ok; i-- {
			s := t.Shape[i]
			if s == 0 {
				last, ok = -1, true // no elements
				break
			}
			st := stride
			if t.Strides != nil && i < len(t.Strides) {
				st = t.Strides[i]
			}
			ok = s > 0 && st >= 0 && (s-1) <= (math.MaxInt64-last)/max64(st, 1)
			if ok {
				last += (s - 1) * st
				ok = stride <= math.MaxInt64/max64(s, 1)
				stride *= s
			}
		}
		_, bits := dlpackType(t.DType)
		if !ok || (last >= 0 && (last+1) > t.hostBytes/(bits/8)) {
			return argError(StatusShapeMismatch, fmt.Sprintf(
				"a Tensor of a %d-byte slice now has shape %v, strides %v and dtype %d: it reaches past its slice",
				t.hostBytes, t.Shape, t.Strides, t.DType))
		}
	}
	return nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func (t *Tensor) appendDesc(desc []int64) []int64 {
	code, bits := dlpackType(t.DType)
	hasStrides := int64(0)
	if t.Strides != nil {
		if len(t.Strides) != len(t.Shape) {
			panic(fmt.Sprintf("bspa: a tensor of shape %v with %d strides", t.Shape, len(t.Strides)))
		}
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
	if err := checkHostExtents(&k, &v); err != nil {
		return err
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
	if err := checkHostExtents(&q, &out, lse); err != nil {
		return err
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
// [T_new, num_kv_heads, head_dim] (T_new = b.Rows()).
func (p *Pool) KVWriteF32(b *Batch, layer int, k, v []float32) error {
	if err := p.checkHostF32("KVWriteF32"); err != nil {
		return err
	}
	rows, heads, dim := b.Rows(), p.opts.NumKVHeads, p.opts.HeadDim
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
	rows, heads, dim := b.Rows(), l.NumHeads(), p.opts.HeadDim
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

// PrefillWorkspaceBytes is the size of PagedArgs.Workspace for launches on dev with
// headDim: 0 where no launch uses one (the CPU; a GPU, build or head_dim without the
// Hopper kernel), about 27 MB for head_dim 128 on an H200. Safe for concurrent use; the
// answer is fixed per device and head_dim. Errors: ErrInvalidArgument (headDim <= 0),
// ErrNoDevice (no such CUDA device), ErrNotSupported (other device types), ErrCUDA.
func PrefillWorkspaceBytes(dev Device, headDim int) (int, error) {
	var bytes C.size_t
	err := call(func() C.bspa_status {
		return C.bspa_prefill_workspace_bytes(C.int32_t(dev.Type), C.int32_t(dev.ID), C.int32_t(headDim), &bytes)
	})
	return int(bytes), err
}

// PagedArgs are the arguments of PrefillPaged (bspa_paged_args): bring-your-own cache,
// the attention of Pool.Prefill over caller-owned pages. All tensors live on one device,
// the integer metadata included.
type PagedArgs struct {
	Q   Tensor  // [T_new, Hq, head_dim] of the pages' dtype (BF16 or F16 over FP8E4M3 pages); Hq = Layout.NumHeads(), a multiple of num_kv_heads
	Out Tensor  // like Q; written
	LSE *Tensor // optional [Hq, T_new] F32: the natural log of each row's softmax denominator; written

	// [num_pages, num_kv_heads, page_size, head_dim], last dimension contiguous.
	KPages, VPages Tensor
	// I32 [num_seqs, max_pages_per_seq]: sequence i's token t lives in page
	// BlockTable[i][t/page_size] at slot t%page_size.
	BlockTable Tensor
	// I32 [num_seqs+1], compact: rows of Q/Out, QueryStarts[0] == 0.
	QueryStarts Tensor
	// I32 [num_seqs], compact: tokens before the new ones. Sequence i has
	// ContextLens[i] + its query length tokens in its pages, the new tokens' K/V included.
	ContextLens Tensor
	MaxQueryLen int // an upper bound of the query lengths (sizes the CUDA grid)
	// The longest query among the sequences the caller treats as decode rows (1 for plain
	// decode; zero: no bound, i.e. 8). On CUDA only sequences of up to that many new tokens
	// (at most 8) take the decode kernel, whose tile it sizes, and longer ones the prefill
	// kernel. A hint: any value is correct; the CPU ignores it.
	MaxDecodeQueryLen int
	Layout            *Layout
	Scale             float32 // multiplies the logits (Phi-3-small: 1/128)
	// Optional U8 [n] scratch on the tensors' device, 16-byte aligned,
	// n >= PrefillWorkspaceBytes (a smaller one splits less or not at all). Needs no
	// initialisation; launches that share it must not overlap.
	Workspace *Tensor
	// FP8E4M3 pages (KPages/VPages of that dtype, or U8): their F32 [num_kv_heads]
	// dequantization scales on the tensors' device, both or neither; Q and Out are then
	// BF16 or F16.
	KScale, VScale *Tensor
}

// PrefillPaged runs block-sparse causal attention of the new tokens over caller-owned
// pages (bspa_prefill_paged) on stream. The library keeps no pointer past the call.
//
// The tensors' memory must be valid for their shapes, and stay alive until the launch
// completes on the stream: the library cannot check either. On CUDA the metadata's page
// ids and lengths must be in range too (the kernel does not read them back); on the CPU
// they are checked (ErrOutOfRange). Errors: as Prefill, plus ErrVersion, and for the
// workspace ErrShapeMismatch, ErrDtypeMismatch, ErrDeviceMismatch, ErrNullPointer and
// ErrInvalidArgument (not 16-byte aligned); q rows with no sequence, or MaxQueryLen 0,
// are ErrOutOfRange.
func PrefillPaged(args PagedArgs, stream Stream) error {
	l := args.Layout
	if l == nil {
		return argError(StatusNullPointer, "PrefillPaged: Layout is nil")
	}
	if args.MaxQueryLen < 0 || args.MaxQueryLen > math.MaxInt32 {
		return argError(StatusInvalidArgument, fmt.Sprintf("PrefillPaged: MaxQueryLen = %d is not in [0, %d]",
			args.MaxQueryLen, math.MaxInt32))
	}
	if args.MaxDecodeQueryLen < 0 || args.MaxDecodeQueryLen > math.MaxInt32 {
		return argError(StatusInvalidArgument, fmt.Sprintf("PrefillPaged: MaxDecodeQueryLen = %d is not in [0, %d]",
			args.MaxDecodeQueryLen, math.MaxInt32))
	}
	if err := checkHostExtents(&args.Q, &args.Out, &args.KPages, &args.VPages, &args.BlockTable, &args.QueryStarts,
		&args.ContextLens, args.LSE, args.Workspace, args.KScale, args.VScale); err != nil {
		return err
	}
	desc := args.Q.appendDesc(nil)
	for _, t := range []*Tensor{&args.Out, &args.KPages, &args.VPages, &args.BlockTable, &args.QueryStarts,
		&args.ContextLens} {
		desc = t.appendDesc(desc)
	}
	var lseData, wsData unsafe.Pointer
	hasLSE, hasWS := C.int(0), C.int(0)
	if args.LSE != nil {
		desc = args.LSE.appendDesc(desc)
		lseData, hasLSE = args.LSE.Data, 1
	}
	if args.Workspace != nil {
		desc = args.Workspace.appendDesc(desc)
		wsData, hasWS = args.Workspace.Data, 1
	}
	if (args.KScale == nil) != (args.VScale == nil) {
		return argError(StatusNullPointer, "PrefillPaged: KScale and VScale go together")
	}
	var ksData, vsData unsafe.Pointer
	hasScales := C.int(0)
	if args.KScale != nil {
		desc = args.VScale.appendDesc(args.KScale.appendDesc(desc))
		ksData, vsData, hasScales = args.KScale.Data, args.VScale.Data, 1
	}
	return l.use(func() error {
		return call(func() C.bspa_status {
			return C.go_prefill_paged(args.Q.Data, args.Out.Data, args.KPages.Data, args.VPages.Data,
				args.BlockTable.Data, args.QueryStarts.Data, args.ContextLens.Data, lseData, hasLSE, wsData, hasWS,
				ksData, vsData, hasScales,
				(*C.int64_t)(unsafe.Pointer(&desc[0])), C.int32_t(args.MaxQueryLen),
				C.int32_t(args.MaxDecodeQueryLen), l.l, C.float(args.Scale),
				C.uintptr_t(stream))
		})
	})
}

// PagedArgsF32 are the arguments of PrefillPagedF32: PagedArgs over float32 and int32
// host slices, all row-major. num_pages is len(KPages) / (NumKVHeads*PageSize*HeadDim),
// num_seqs is len(ContextLens) (at least 1), T_new is len(Q) / (Hq*HeadDim) with
// Hq = Layout.NumHeads(), and MaxQueryLen is the largest query length of QueryStarts.
type PagedArgsF32 struct {
	Q, Out []float32 // [T_new, Hq, HeadDim]; Out is written
	LSE    []float32 // [Hq, T_new] or nil; written

	KPages, VPages                []float32 // [num_pages, NumKVHeads, PageSize, HeadDim]
	NumKVHeads, PageSize, HeadDim int
	BlockTable                    []int32 // [num_seqs, max_pages_per_seq]
	QueryStarts                   []int32 // [num_seqs+1], QueryStarts[0] == 0
	ContextLens                   []int32 // [num_seqs]
	Layout                        *Layout
	Scale                         float32
	// Optional, 16-byte aligned: the CPU uses none (PrefillWorkspaceBytes is 0) but checks
	// one it is given. nil or empty: none.
	Workspace []byte
}

// PrefillPagedF32 is PrefillPaged on host slices (the CPU backend, which checks every page
// id and length of the metadata). Slices whose lengths do not fit the shapes described in
// PagedArgsF32 are ErrShapeMismatch before the library is called; the library's errors
// otherwise (e.g. ErrOutOfRange for a page id past num_pages). Safe for concurrent use
// with distinct Out, LSE and Workspace slices.
func PrefillPagedF32(a PagedArgsF32) error {
	if a.Layout == nil {
		return argError(StatusNullPointer, "PrefillPagedF32: Layout is nil")
	}
	hkv, ps, dim := a.NumKVHeads, a.PageSize, a.HeadDim
	if hkv < 1 || ps < 1 || dim < 1 {
		return argError(StatusShapeMismatch, fmt.Sprintf(
			"PrefillPagedF32: NumKVHeads = %d, PageSize = %d, HeadDim = %d: each must be at least 1", hkv, ps, dim))
	}
	pageElems := hkv * ps * dim
	if len(a.KPages) == 0 || len(a.KPages)%pageElems != 0 || len(a.VPages) != len(a.KPages) {
		return argError(StatusShapeMismatch, fmt.Sprintf(
			"k_pages has %d and v_pages %d elements, expected the same positive multiple of [%d, %d, %d]",
			len(a.KPages), len(a.VPages), hkv, ps, dim))
	}
	numPages := len(a.KPages) / pageElems
	heads := a.Layout.NumHeads()
	if heads < 1 || len(a.Q) == 0 || len(a.Q)%(heads*dim) != 0 {
		return argError(StatusShapeMismatch, fmt.Sprintf(
			"q has %d elements, not a positive multiple of [Hq, HeadDim] = [%d, %d]", len(a.Q), heads, dim))
	}
	rows := len(a.Q) / (heads * dim)
	if err := checkRows("out", len(a.Out), rows, heads, dim); err != nil {
		return err
	}
	numSeqs := len(a.ContextLens)
	if numSeqs == 0 || len(a.QueryStarts) != numSeqs+1 {
		return argError(StatusShapeMismatch, fmt.Sprintf(
			"%d context lengths and %d query starts: need at least one sequence and one more start",
			numSeqs, len(a.QueryStarts)))
	}
	maxPages := len(a.BlockTable) / numSeqs
	if maxPages == 0 || len(a.BlockTable) != numSeqs*maxPages {
		return argError(StatusShapeMismatch, fmt.Sprintf(
			"block_table has %d entries, not a positive multiple of the %d sequences", len(a.BlockTable), numSeqs))
	}
	maxQueryLen := int64(0)
	for i := 1; i < len(a.QueryStarts); i++ {
		if n := int64(a.QueryStarts[i]) - int64(a.QueryStarts[i-1]); n > maxQueryLen {
			maxQueryLen = n
		}
	}
	if maxQueryLen > math.MaxInt32 {
		maxQueryLen = math.MaxInt32
	}
	pages := []int64{int64(numPages), int64(hkv), int64(ps), int64(dim)}
	shape := []int64{int64(rows), int64(heads), int64(dim)}
	args := PagedArgs{
		Q:           HostF32(a.Q, shape...),
		Out:         HostF32(a.Out, shape...),
		KPages:      HostF32(a.KPages, pages...),
		VPages:      HostF32(a.VPages, pages...),
		BlockTable:  HostI32(a.BlockTable, int64(numSeqs), int64(maxPages)),
		QueryStarts: HostI32(a.QueryStarts, int64(numSeqs+1)),
		ContextLens: HostI32(a.ContextLens, int64(numSeqs)),
		MaxQueryLen: int(maxQueryLen),
		Layout:      a.Layout,
		Scale:       a.Scale,
	}
	if a.LSE != nil {
		if err := checkRows("lse", len(a.LSE), heads, rows, 1); err != nil {
			return err
		}
		t := HostF32(a.LSE, int64(heads), int64(rows))
		args.LSE = &t
	}
	if len(a.Workspace) > 0 {
		t := HostU8(a.Workspace, int64(len(a.Workspace)))
		args.Workspace = &t
	}
	return PrefillPaged(args, 0)
}
