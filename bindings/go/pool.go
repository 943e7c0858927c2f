package bspa

/*
#include <stdlib.h>
#include <bspa/bspa.h>

static bspa_stream go_stream(uintptr_t s) { return (bspa_stream)s; }
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// DeviceType is a DLPack device type.
type DeviceType int32

const (
	CPU  DeviceType = C.kDLCPU
	CUDA DeviceType = C.kDLCUDA
)

// Device is where a pool's storage or a tensor lives.
type Device struct {
	Type DeviceType
	ID   int
}

// DType is the element type of a pool and its attention tensors.
type DType int32

const (
	F32  DType = C.BSPA_DTYPE_F32
	F16  DType = C.BSPA_DTYPE_F16
	BF16 DType = C.BSPA_DTYPE_BF16
	// FP8E4M3 is for pools (and PrefillPaged's pages) only: e4m3 bytes with per-(layer, KV
	// head) scales (SetKVScales, required before a layer is written); KVWrite's K/V, Q and
	// Out stay BF16 or F16.
	FP8E4M3 DType = C.BSPA_DTYPE_FP8_E4M3
)

// Element types of tensors only, not of pools (NewPool refuses them): PagedArgs' integer
// metadata (I32) and workspace (U8). Negative, so no library dtype ever takes their values.
const (
	I32 DType = -1 - iota // int32
	U8                    // uint8
)

// DefaultMemoryBytes is the KV storage budget of a pool that names neither NumPages nor
// MemoryBytes: 256 MiB, e.g. 4096 pages of the default shape in float32.
const DefaultMemoryBytes = 256 << 20

// PoolOptions configure NewPool. The zero value is usable: every zero field takes its
// default, so PoolOptions{NumKVHeads: 2, HeadDim: 64} is a float32 CPU pool of one layer,
// 64-token pages and DefaultMemoryBytes of storage.
type PoolOptions struct {
	Device          Device // zero: the CPU
	DType           DType  // zero: F32 (CUDA pools want BF16 or F16; see CUDAPoolOptions)
	NumLayers       int    // zero: 1
	BookkeepingOnly bool   // a pool with no KV storage (prefix lookup only); NumLayers is ignored
	NumKVHeads      int    // zero: 1
	HeadDim         int    // zero: 128
	PageSize        int    // zero: 64 tokens
	NumPages        int64  // zero: derived from MemoryBytes
	MemoryBytes     uint64 // KV storage budget when NumPages is zero; zero: DefaultMemoryBytes
	HashSeed        uint64 // zero: the library's fixed default seed (stable across processes)
	EventsCapacity  int64  // KV cache event records kept until drained (DrainEvents); zero: no events
}

// DefaultPoolOptions are the zero value's defaults written out: CPU, F32, one layer, one
// kv head, head_dim 128, 64-token pages, DefaultMemoryBytes, the default hash seed.
func DefaultPoolOptions() PoolOptions {
	var o C.bspa_pool_options
	C.bspa_pool_options_init(&o)
	return PoolOptions{
		Device:      Device{Type: DeviceType(o.device_type), ID: int(o.device_id)},
		DType:       F32,
		NumLayers:   int(o.num_layers),
		NumKVHeads:  int(o.num_kv_heads),
		HeadDim:     int(o.head_dim),
		PageSize:    int(o.page_size),
		MemoryBytes: DefaultMemoryBytes,
		HashSeed:    uint64(o.hash_seed),
	}
}

// CUDAPoolOptions are DefaultPoolOptions for GPU `id`, in BF16 (the GPU kernels take 16-bit
// K/V).
func CUDAPoolOptions(id int) PoolOptions {
	o := DefaultPoolOptions()
	o.Device, o.DType = Device{Type: CUDA, ID: id}, BF16
	return o
}

// PoolStats is a snapshot of a pool's counters.
type PoolStats struct {
	PagesTotal, PagesFree, PagesCached, PagesInUse, NumSequences int64
	MatchCalls, Hits, Misses, MatchedTokens, QueriedTokens       uint64
	HashedTokens, PublishedPages, Evictions                      uint64
}

// Pool is a paged KV pool with its prefix cache. Safe for concurrent use.
type Pool struct {
	// mu guards the lifetime of the pool and of every handle made from it: calls hold it
	// for reading, Close calls for writing. The C pool synchronises the calls themselves.
	mu   sync.RWMutex
	p    *C.bspa_pool
	opts PoolOptions
	// Live batches by C handle: the sequences each uses and the id of the Go Batch that owns
	// it. The id, not the address, says whether a Batch is still live: a batch closed with
	// one of its sequences frees its C handle, which the next batch may be given, and the
	// old Batch must not reach (or close) the new one. Keyed by the C handle, not the Batch,
	// so that an abandoned Batch can still be finalized.
	batches     map[*C.bspa_batch]liveBatch
	nextBatchID uint64
	// live KV exports and imports (transfer.go): each entry frees its C handle
	// Keyed by the C handle, the closure holding only that handle: nothing of the pool
	// points at a KVExport or KVImport, so one dropped without Close is still finalized
	// (and a pool dropped with one is freed).
	transfers map[unsafe.Pointer]func()
}

// NewPool creates a pool. Close it when done (a finalizer does it otherwise).
func NewPool(opts PoolOptions) (*Pool, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var o C.bspa_pool_options
	if err := call(func() C.bspa_status { return C.bspa_pool_options_init(&o) }); err != nil {
		return nil, err
	}
	// Zero fields keep the library's defaults (o holds them), except the dtype (F32 is
	// zero) and the budget (DefaultMemoryBytes). The pool remembers what it was made with.
	if opts.Device.Type == 0 {
		opts.Device = Device{Type: CPU}
	}
	setInt := func(dst *C.int32_t, v *int) {
		if *v == 0 {
			*v = int(*dst)
		}
		*dst = C.int32_t(*v)
	}
	o.device_type = C.int32_t(opts.Device.Type)
	o.device_id = C.int32_t(opts.Device.ID)
	o.dtype = C.bspa_dtype(opts.DType)
	setInt(&o.num_layers, &opts.NumLayers)
	if opts.BookkeepingOnly {
		o.num_layers, opts.NumLayers = 0, 0
	}
	setInt(&o.num_kv_heads, &opts.NumKVHeads)
	setInt(&o.head_dim, &opts.HeadDim)
	setInt(&o.page_size, &opts.PageSize)
	if opts.NumPages == 0 && opts.MemoryBytes == 0 {
		opts.MemoryBytes = DefaultMemoryBytes
	}
	o.num_pages = C.int64_t(opts.NumPages)
	o.memory_bytes = C.uint64_t(opts.MemoryBytes)
	if opts.HashSeed == 0 {
		opts.HashSeed = uint64(o.hash_seed)
	}
	o.hash_seed = C.uint64_t(opts.HashSeed)
	o.events_capacity = C.int64_t(opts.EventsCapacity)
	var p *C.bspa_pool
	if err := call(func() C.bspa_status { return C.bspa_pool_create(&p, &o) }); err != nil {
		return nil, err
	}
	pool := &Pool{p: p, opts: opts, batches: map[*C.bspa_batch]liveBatch{}, transfers: map[unsafe.Pointer]func(){}}
	runtime.SetFinalizer(pool, (*Pool).Close)
	return pool, nil
}

// Close destroys the pool, its batches and sequences (their handles become closed).
// Idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p == nil {
		return nil
	}
	for b := range p.batches {
		C.bspa_batch_destroy(b)
	}
	p.batches = nil
	for _, free := range p.transfers { // an open import aborts
		free()
	}
	p.transfers = nil
	C.bspa_pool_destroy(p.p)
	p.p = nil
	runtime.SetFinalizer(p, nil)
	return nil
}

// Options are the options the pool was made with.
func (p *Pool) Options() PoolOptions { return p.opts }

// use runs f with the pool held open; ErrClosed if it is closed.
func (p *Pool) use(f func() error) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.p == nil {
		return ErrClosed
	}
	return f()
}

// Stats returns a snapshot of the pool's counters.
func (p *Pool) Stats() (PoolStats, error) {
	var s C.struct_bspa_pool_stats
	err := p.use(func() error { return call(func() C.bspa_status { return C.bspa_pool_stats(p.p, &s) }) })
	return PoolStats{
		PagesTotal: int64(s.pages_total), PagesFree: int64(s.pages_free), PagesCached: int64(s.pages_cached),
		PagesInUse: int64(s.pages_in_use), NumSequences: int64(s.num_sequences), MatchCalls: uint64(s.match_calls),
		Hits: uint64(s.hits), Misses: uint64(s.misses), MatchedTokens: uint64(s.matched_tokens),
		QueriedTokens: uint64(s.queried_tokens), HashedTokens: uint64(s.hashed_tokens),
		PublishedPages: uint64(s.published_pages), Evictions: uint64(s.evictions),
	}, err
}

// SetKVScales sets one layer's fp32 dequantization scales of an FP8E4M3 pool, one per KV
// head for K and for V (value = scale × e4m3; e.g. amax / 448 from calibration). The
// slices are copied. Errors: ErrInvalidArgument (a length other than NumKVHeads, or a
// scale not finite and > 0: the message names layer, head and value), ErrOutOfRange
// (layer), ErrInvalidState (a pool of another dtype); a failed call changes nothing.
func (p *Pool) SetKVScales(layer int, k, v []float32) error {
	if len(k) != len(v) || len(k) == 0 {
		return argError(StatusInvalidArgument, fmt.Sprintf("SetKVScales: %d K scales and %d V scales", len(k), len(v)))
	}
	return p.use(func() error {
		return call(func() C.bspa_status {
			return C.bspa_pool_set_kv_scales(p.p, C.int32_t(layer), (*C.float)(unsafe.Pointer(&k[0])),
				(*C.float)(unsafe.Pointer(&v[0])), C.int32_t(len(k)))
		})
	})
}

// KVScales returns one layer's K and V scales of an FP8E4M3 pool; ErrInvalidState when
// they were never set.
func (p *Pool) KVScales(layer int) (k, v []float32, err error) {
	n := p.opts.NumKVHeads
	if n < 1 {
		return nil, nil, argError(StatusInvalidState, "KVScales: the pool has no KV heads")
	}
	k, v = make([]float32, n), make([]float32, n)
	err = p.use(func() error {
		return call(func() C.bspa_status {
			return C.bspa_pool_get_kv_scales(p.p, C.int32_t(layer), (*C.float)(unsafe.Pointer(&k[0])),
				(*C.float)(unsafe.Pointer(&v[0])), C.int32_t(n))
		})
	})
	if err != nil {
		return nil, nil, err
	}
	return k, v, nil
}

// PoolInfo is what a pool was made with (bspa_pool_info); PageBytes counts one page over
// all layers, K and V.
type PoolInfo struct {
	DType                                    DType
	NumLayers, NumKVHeads, HeadDim, PageSize int
	NumPages                                 int64
	PageBytes, StorageBytes                  uint64
	KVScalesLayers                           int
}

// Info returns the pool's geometry, dtype and storage bytes.
func (p *Pool) Info() (PoolInfo, error) {
	var i C.struct_bspa_pool_info
	i.version = C.BSPA_POOL_INFO_VERSION
	err := p.use(func() error { return call(func() C.bspa_status { return C.bspa_pool_info(p.p, &i) }) })
	return PoolInfo{
		DType: DType(i.dtype), NumLayers: int(i.num_layers), NumKVHeads: int(i.num_kv_heads), HeadDim: int(i.head_dim),
		PageSize: int(i.page_size), NumPages: int64(i.num_pages), PageBytes: uint64(i.page_bytes),
		StorageBytes: uint64(i.storage_bytes), KVScalesLayers: int(i.kv_scales_layers),
	}, err
}

// Check verifies every invariant of the pool (for tests); ErrInternal if one is broken.
func (p *Pool) Check() error {
	return p.use(func() error { return call(func() C.bspa_status { return C.bspa_pool_check(p.p) }) })
}

// SequenceOptions configure NewSequenceWith.
type SequenceOptions struct {
	// Salt isolates tenants. It must come from the server (a tenant id), never from a
	// request body: shared prefixes are observable through timing.
	Salt     []byte
	ExtraKey uint64 // mixed into every page key, e.g. a LoRA adapter id
}

// NewSequence creates an empty sequence without salt.
func (p *Pool) NewSequence() (*Sequence, error) { return p.NewSequenceWith(SequenceOptions{}) }

// NewSequenceWith creates an empty sequence.
func (p *Pool) NewSequenceWith(opts SequenceOptions) (*Sequence, error) {
	var s *C.bspa_seq
	err := p.use(func() error {
		var o C.bspa_seq_options
		if err := call(func() C.bspa_status { return C.bspa_seq_options_init(&o) }); err != nil {
			return err
		}
		o.extra_key = C.uint64_t(opts.ExtraKey)
		if len(opts.Salt) > 0 {
			// C memory: the options struct is itself passed by pointer, so it may not hold
			// a Go pointer. The library copies the salt.
			salt := C.CBytes(opts.Salt)
			defer C.free(salt)
			o.salt = salt
			o.salt_len = C.size_t(len(opts.Salt))
		}
		return call(func() C.bspa_status { return C.bspa_seq_create(&s, p.p, &o) })
	})
	if err != nil {
		return nil, err
	}
	seq := &Sequence{pool: p, s: s}
	runtime.SetFinalizer(seq, (*Sequence).Close)
	return seq, nil
}

// SeqInfo says what a sequence holds.
type SeqInfo struct {
	NumTokens, NumComputed, NumCached, NumPages int64
}

// Sequence is one request's tokens and pages. Safe for concurrent use.
type Sequence struct {
	pool *Pool // keeps the pool alive as long as the sequence
	s    *C.bspa_seq
}

// use runs f with the sequence and its pool held open.
func (s *Sequence) use(f func() error) error {
	defer runtime.KeepAlive(s)
	return s.pool.use(func() error {
		if s.s == nil {
			return ErrClosed
		}
		return f()
	})
}

// Close releases the sequence's pages (published pages stay cached) and closes the
// batches that use it. Idempotent; a no-op once the pool is closed.
func (s *Sequence) Close() error {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.s == nil || p.p == nil {
		s.s = nil
		return nil
	}
	for b, live := range p.batches {
		for _, member := range live.seqs {
			if member == s.s {
				C.bspa_batch_destroy(b)
				delete(p.batches, b)
				break
			}
		}
	}
	C.bspa_seq_destroy(s.s)
	s.s = nil
	runtime.SetFinalizer(s, nil)
	return nil
}

func tokensPtr(tokens []int32) *C.int32_t {
	if len(tokens) == 0 {
		return nil
	}
	return (*C.int32_t)(unsafe.Pointer(&tokens[0]))
}

// Match pins the longest cached page-aligned prefix of tokens (never the last token)
// and returns its length; 0 on a miss. Only on an empty sequence.
func (s *Sequence) Match(tokens []int32) (int, error) {
	var cached C.int64_t
	err := s.use(func() error {
		return call(func() C.bspa_status {
			return C.bspa_seq_match(s.s, tokensPtr(tokens), C.int64_t(len(tokens)), &cached)
		})
	})
	return int(cached), err
}

// Append adds tokens and reserves their pages; all or nothing (ErrOutOfPages changes nothing).
func (s *Sequence) Append(tokens []int32) error {
	return s.use(func() error {
		return call(func() C.bspa_status { return C.bspa_seq_append(s.s, tokensPtr(tokens), C.int64_t(len(tokens))) })
	})
}

// Commit declares tokens [0, computed) hold valid KV; full pages are published.
func (s *Sequence) Commit(computed int) error {
	return s.use(func() error {
		return call(func() C.bspa_status { return C.bspa_seq_commit(s.s, C.int64_t(computed)) })
	})
}

// Pages returns the sequence's page ids in token order.
func (s *Sequence) Pages() ([]int32, error) {
	var pages []int32
	err := s.use(func() error {
		for {
			var n C.int64_t
			if err := call(func() C.bspa_status { return C.bspa_seq_pages(s.s, nil, 0, &n) }); err != nil {
				return err
			}
			pages = make([]int32, int(n)+1) // never empty, so &pages[0] exists
			err := call(func() C.bspa_status {
				return C.bspa_seq_pages(s.s, (*C.int32_t)(unsafe.Pointer(&pages[0])), C.int64_t(len(pages)), &n)
			})
			if err == nil {
				pages = pages[:int(n)]
				return nil
			}
			if e, ok := err.(*Error); !ok || e.Status != StatusBufferTooSmall {
				return err
			}
			// Another goroutine appended in between: ask again.
		}
	})
	return pages, err
}

// Info returns the sequence's token and page counts.
func (s *Sequence) Info() (SeqInfo, error) {
	var i C.struct_bspa_seq_info
	err := s.use(func() error { return call(func() C.bspa_status { return C.bspa_seq_info(s.s, &i) }) })
	return SeqInfo{int64(i.num_tokens), int64(i.num_computed), int64(i.num_cached), int64(i.num_pages)}, err
}

// Batch is one engine step's plan. Use it from one goroutine at a time.
type Batch struct {
	pool      *Pool
	seqs      []*Sequence // keeps them alive as long as the batch
	b         *C.bspa_batch
	id        uint64     // its entry in pool.batches (see there)
	mu        sync.Mutex // one call at a time (bspa.h): a Plan replaces what a launch reads
	numTokens int
	rows      int           // rows of the launch tensors: numTokens, or MaxTokens of a fixed shape
	reusable  *BatchOptions // nil for a one-step batch (NewBatch)
}

// NewBatch plans one step: seqs[i] computes queryLens[i] new tokens after its computed
// ones. Token rows of q/k/v/out are the new tokens concatenated in order. stream is a
// cudaStream_t for CUDA pools (0: the default stream); CPU pools ignore it.
func (p *Pool) NewBatch(seqs []*Sequence, queryLens []int32, stream Stream) (*Batch, error) {
	if len(seqs) != len(queryLens) || len(seqs) == 0 {
		return nil, argError(StatusInvalidArgument,
			fmt.Sprintf("%d sequences and %d query lengths: need as many, at least one", len(seqs), len(queryLens)))
	}
	for _, s := range seqs {
		if s.pool != p {
			return nil, argError(StatusInvalidArgument, "a sequence of another pool")
		}
	}
	var b *C.bspa_batch
	numTokens := 0
	for _, q := range queryLens {
		numTokens += int(q)
	}
	p.mu.Lock() // registers the batch: excludes Close of the pool and of sequences
	defer p.mu.Unlock()
	if p.p == nil {
		return nil, ErrClosed
	}
	// C memory for the handle array: cgo forbids passing Go memory that holds pointers.
	raw := unsafe.Slice((**C.bspa_seq)(C.malloc(C.size_t(len(seqs))*C.size_t(unsafe.Sizeof(uintptr(0))))), len(seqs))
	defer C.free(unsafe.Pointer(&raw[0]))
	for i, s := range seqs {
		if s.s == nil {
			return nil, ErrClosed
		}
		raw[i] = s.s
	}
	err := call(func() C.bspa_status {
		return C.bspa_batch_create(&b, p.p, &raw[0], (*C.int32_t)(unsafe.Pointer(&queryLens[0])), C.int32_t(len(seqs)),
			C.go_stream(C.uintptr_t(stream)))
	})
	if err != nil {
		return nil, err
	}
	members := make([]*C.bspa_seq, len(seqs))
	copy(members, raw)
	batch := &Batch{pool: p, seqs: append([]*Sequence(nil), seqs...), b: b, id: p.registerBatch(b, members),
		numTokens: numTokens, rows: numTokens}
	runtime.SetFinalizer(batch, (*Batch).Close)
	return batch, nil
}

type liveBatch struct {
	id   uint64
	seqs []*C.bspa_seq // closing one of them closes the batch (none for a reusable batch)
}

// registerBatch records a new C batch that uses seqs and returns the id of its Batch. Call
// with p.mu held for writing.
func (p *Pool) registerBatch(b *C.bspa_batch, seqs []*C.bspa_seq) uint64 {
	p.nextBatchID++
	p.batches[b] = liveBatch{id: p.nextBatchID, seqs: seqs}
	return p.nextBatchID
}

// batchLive says whether b's C handle is still its own (not closed with a sequence, its address
// perhaps handed to another batch since). Call with p.mu held.
func (p *Pool) batchLive(b *Batch) bool {
	e, ok := p.batches[b.b]
	return ok && e.id == b.id
}

// NumTokens is the number of the step's new tokens: the sum of the query lengths.
func (b *Batch) NumTokens() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.numTokens
}

// Rows is the number of rows of q/k/v/out: NumTokens, except for a reusable batch with
// FixedLaunchShape, whose tensors have MaxTokens rows (the step's are the first NumTokens).
func (b *Batch) Rows() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rows
}

// Close destroys the plan; no launch using it may still run on a device. Idempotent.
func (b *Batch) Close() error {
	p := b.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.b != nil && p.p != nil && p.batchLive(b) {
		C.bspa_batch_destroy(b.b)
		delete(p.batches, b.b)
	}
	b.b = nil
	runtime.SetFinalizer(b, nil)
	return nil
}

// use runs f with the batch, its pool and its sequences held open, and no other call of
// the batch running (another goroutine's Plan or launch waits).
func (b *Batch) use(f func() error) error {
	defer runtime.KeepAlive(b)
	return b.pool.use(func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.b == nil {
			return ErrClosed
		}
		if !b.pool.batchLive(b) { // closed with one of its sequences
			return ErrClosed
		}
		return f()
	})
}
