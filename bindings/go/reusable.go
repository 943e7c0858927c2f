package bspa

/*
#include <stdlib.h>
#include <bspa/bspa.h>

static bspa_stream go_plan_stream(uintptr_t s) { return (bspa_stream)s; }
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// BatchOptions are the limits of NewReusableBatch (struct bspa_batch_options). MaxSeqs,
// MaxTokens and MaxSeqTokens are required; the library refuses a zero one, naming it.
type BatchOptions struct {
	MaxSeqs      int   // sequences a plan may hold, >= 1 (CUDA: <= 65535; see bspa_batch_options)
	MaxTokens    int64 // new tokens of a step (the sum of the query lengths), 1..MaxInt32
	MaxSeqTokens int64 // tokens (computed + new) one sequence may have at planning, 1..MaxInt32
	MaxQueryLen  int   // new tokens of one sequence, 0..MaxTokens; zero: MaxTokens
	// FixedLaunchShape sizes every launch from the limits alone, so a CUDA graph captured
	// once replays after any later plan: q, out, k and v then have exactly MaxTokens rows
	// (Batch.Rows), of which the step's new tokens are the first NumTokens; the rows past
	// them are neither read nor written.
	FixedLaunchShape bool
	// MaxDecodeQueryLen is the longest query among the sequences the caller treats as
	// decode rows (1 for plain decode; zero: no bound, i.e. 8). On CUDA only sequences of up
	// to that many new tokens (at most 8) take the decode kernel, whose tile a fixed-shape
	// batch otherwise sizes for min(MaxQueryLen, 8). A hint: every value is correct (the
	// CPU ignores it); negative is ErrInvalidArgument.
	MaxDecodeQueryLen int
}

// NewReusableBatch creates a batch sized once from opts, with no plan yet: Plan replaces
// its plan every step, and KVWrite/Prefill take it as any Batch (before the first Plan they
// return ErrInvalidState). A CUDA pool allocates its device metadata, two pinned staging
// buffers and the split workspace here and frees them in Close, so plans and launches
// allocate nothing (DeviceAllocationCounts). Unlike a one-step batch it is not closed with
// the sequences of its plan: the plan holds a reference to each (a sequence closed meanwhile
// keeps its pages out of reuse until the next Plan or Close). Closing the pool closes it.
// Errors: ErrInvalidArgument (a limit out of its range, named with its value),
// ErrInvalidState (a pool without KV storage), ErrOutOfMemory, ErrCUDA.
func (p *Pool) NewReusableBatch(opts BatchOptions) (*Batch, error) {
	var o C.bspa_batch_options
	if err := call(func() C.bspa_status { return C.bspa_batch_options_init(&o) }); err != nil {
		return nil, err
	}
	for _, v := range []struct {
		name  string
		value int64
	}{{"MaxSeqs", int64(opts.MaxSeqs)}, {"MaxQueryLen", int64(opts.MaxQueryLen)},
		{"MaxDecodeQueryLen", int64(opts.MaxDecodeQueryLen)}} {
		if v.value != int64(int32(v.value)) { // would wrap in the C struct's int32
			return nil, argError(StatusInvalidArgument, fmt.Sprintf("NewReusableBatch: %s = %d does not fit int32", v.name, v.value))
		}
	}
	o.max_seqs = C.int32_t(opts.MaxSeqs)
	o.max_tokens = C.int64_t(opts.MaxTokens)
	o.max_seq_tokens = C.int64_t(opts.MaxSeqTokens)
	o.max_query_len = C.int32_t(opts.MaxQueryLen)
	o.max_decode_query_len = C.int32_t(opts.MaxDecodeQueryLen)
	if opts.FixedLaunchShape {
		o.fixed_launch_shape = 1
	}
	p.mu.Lock() // registers the batch: excludes Close of the pool
	defer p.mu.Unlock()
	if p.p == nil {
		return nil, ErrClosed
	}
	var b *C.bspa_batch
	if err := call(func() C.bspa_status { return C.bspa_batch_create_reusable(&b, p.p, &o) }); err != nil {
		return nil, err
	}
	if opts.MaxQueryLen == 0 {
		opts.MaxQueryLen = int(opts.MaxTokens) // the library's default
	}
	// No members: closing a sequence does not close it.
	batch := &Batch{pool: p, b: b, id: p.registerBatch(b, nil), reusable: &opts}
	runtime.SetFinalizer(batch, (*Batch).Close)
	return batch, nil
}

// Plan replaces a reusable batch's plan with one of the step given (bspa_batch_plan), with
// NewBatch's meaning of seqs and queryLens. stream is a cudaStream_t for CUDA pools (0: the
// default stream; CPU pools ignore it): launches queued on it before the call still see the
// previous plan, launches after it this one, so plan and launch on one stream. A step past a
// limit is ErrOutOfRange naming it; a failed Plan keeps the previous plan (and NumTokens,
// Rows) as it was. Errors: those of NewBatch, ErrInvalidArgument (a one-step batch),
// ErrOutOfRange, ErrInvalidState (the stream is capturing a graph), ErrClosed.
func (b *Batch) Plan(seqs []*Sequence, queryLens []int32, stream Stream) error {
	if b.reusable == nil {
		return argError(StatusInvalidArgument, "Plan: a one-step batch (NewBatch) cannot be re-planned; use NewReusableBatch")
	}
	if len(seqs) != len(queryLens) || len(seqs) == 0 {
		return argError(StatusInvalidArgument,
			fmt.Sprintf("Plan: %d sequences and %d query lengths: need as many, at least one", len(seqs), len(queryLens)))
	}
	numTokens := 0
	for _, s := range seqs {
		if s.pool != b.pool {
			return argError(StatusInvalidArgument, "Plan: a sequence of another pool")
		}
	}
	for _, q := range queryLens {
		numTokens += int(q)
	}
	// C memory for the handle array: cgo forbids passing Go memory that holds pointers.
	raw := unsafe.Slice((**C.bspa_seq)(C.malloc(C.size_t(len(seqs))*C.size_t(unsafe.Sizeof(uintptr(0))))), len(seqs))
	defer C.free(unsafe.Pointer(&raw[0]))
	// b.use holds the pool open for reading: Sequence.Close waits, so the handles stay valid.
	err := b.use(func() error {
		for i, s := range seqs {
			if s.s == nil {
				return ErrClosed
			}
			raw[i] = s.s
		}
		if err := call(func() C.bspa_status {
			return C.bspa_batch_plan(b.b, &raw[0], (*C.int32_t)(unsafe.Pointer(&queryLens[0])), C.int32_t(len(seqs)),
				C.go_plan_stream(C.uintptr_t(stream)))
		}); err != nil {
			return err
		}
		// Under the batch's lock, as launches read them.
		b.seqs = append(b.seqs[:0], seqs...)
		b.numTokens, b.rows = numTokens, numTokens
		if b.reusable.FixedLaunchShape {
			b.rows = int(b.reusable.MaxTokens)
		}
		return nil
	})
	runtime.KeepAlive(seqs)
	return err
}

// Reusable returns the limits a batch of NewReusableBatch was made with (MaxQueryLen 0
// reads back as MaxTokens), and false for a one-step batch.
func (b *Batch) Reusable() (BatchOptions, bool) {
	if b.reusable == nil {
		return BatchOptions{}, false
	}
	return *b.reusable, true
}

// DeviceAllocationCounts returns the process-wide counts of the device and pinned-host
// allocations bspa has made and freed (cudaMalloc, cudaHostAlloc and their frees): equal
// before and after a steady-state step that allocates nothing. Safe for concurrent use.
func DeviceAllocationCounts() (allocations, frees uint64, err error) {
	var a, f C.uint64_t
	err = call(func() C.bspa_status { return C.bspa_device_allocation_counts(&a, &f) })
	return uint64(a), uint64(f), err
}
