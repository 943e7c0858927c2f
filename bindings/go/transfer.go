package bspa

/*
#include <stdlib.h>
#include <string.h>
#include <bspa/bspa.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// KV transfer between pools (bspa.h, "KV transfer between pools"): Memory describes where
// a pool's pages live for a transport, ExportKV pins a prompt's cached pages, ImportKV
// reserves pages for the ones a pool lacks (Commit publishes them, Abort or Close frees
// them unpublished). bspa moves no bytes: the caller's transport does.

// KV selects the K or V half of a layer's storage.
type KV int32

const (
	K KV = C.BSPA_KV_K
	V KV = C.BSPA_KV_V
)

// PoolMemory is bspa_pool_memory: region r = 2*layer + kv starts at Base + r*RegionBytes;
// page p of region r is PageBytes at Base + (r*NumPages + p)*PageBytes.
type PoolMemory struct {
	Device                              Device
	NumRegions                          int
	Base, Bytes, RegionBytes, PageBytes uint64
	NumPages                            int64
	Fingerprint                         uint64 // what must match for pages to be interchangeable
	LayoutVersion                       uint32
}

// Desc is one transfer descriptor: Len bytes at Addr on device DeviceID (NIXL's form).
type Desc struct {
	Addr, Len uint64
	DeviceID  int
}

// PageAddress is the first byte of page in layer's K or V; ok false out of range.
func (m PoolMemory) PageAddress(layer int, kv KV, page int64) (addr uint64, ok bool) {
	r := 2*layer + int(kv)
	if layer < 0 || r >= m.NumRegions || page < 0 || page >= m.NumPages {
		return 0, false
	}
	return m.Base + (uint64(r)*uint64(m.NumPages)+uint64(page))*m.PageBytes, true
}

// PageDescs lists one Desc per (page, region): pages in the order given, each page's
// regions in order (layer 0 K, layer 0 V, ...), so two sides listing their pages of the
// same blocks get lists that pair up index by index. ok false for a page out of range.
func (m PoolMemory) PageDescs(pages []int32) (descs []Desc, ok bool) {
	for _, p := range pages {
		for r := 0; r < m.NumRegions; r++ {
			a, ok := m.PageAddress(r/2, KV(r%2), int64(p))
			if !ok {
				return nil, false
			}
			descs = append(descs, Desc{a, m.PageBytes, m.Device.ID})
		}
	}
	return descs, true
}

// Memory describes the pool's storage and its fingerprint.
func (p *Pool) Memory() (PoolMemory, error) {
	var m C.struct_bspa_pool_memory
	m.version = C.BSPA_POOL_MEMORY_VERSION
	err := p.use(func() error { return call(func() C.bspa_status { return C.bspa_pool_memory(p.p, &m) }) })
	return PoolMemory{
		Device: Device{Type: DeviceType(m.device_type), ID: int(m.device_id)}, NumRegions: int(m.num_regions),
		Base: uint64(m.base), Bytes: uint64(m.bytes), RegionBytes: uint64(m.region_bytes),
		PageBytes: uint64(m.page_bytes), NumPages: int64(m.num_pages), Fingerprint: uint64(m.fingerprint),
		LayoutVersion: uint32(m.layout_version),
	}, err
}

// PageAddress is bspa_pool_page_address (checked: ErrOutOfRange, ErrInvalidArgument).
func (p *Pool) PageAddress(layer int, kv KV, page int64) (uint64, error) {
	var a C.uint64_t
	err := p.use(func() error {
		return call(func() C.bspa_status {
			return C.bspa_pool_page_address(p.p, C.int32_t(layer), C.int32_t(kv), C.int64_t(page), &a)
		})
	})
	return uint64(a), err
}

// register records a transfer's C handle with the pool (Close frees it first); free must
// hold nothing but the handle (see Pool.transfers).
func (p *Pool) register(key unsafe.Pointer, free func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.transfers != nil {
		p.transfers[key] = free
	}
}

// KVExport pins a prompt's cached pages for a transport to read. Close releases them.
type KVExport struct {
	pool  *Pool
	e     *C.bspa_kv_export
	Pages []int32     // page ids in block order
	Keys  [][2]uint64 // their keys, low and high 64 bits
}

// ExportKV pins every full cached page of tokens (no n-1 cap; a miss exports none). opts
// carries the prompt's salt and extra key.
func (p *Pool) ExportKV(tokens []int32, opts SequenceOptions) (*KVExport, error) {
	x := &KVExport{pool: p}
	err := p.use(func() error {
		var o C.bspa_seq_options
		if err := call(func() C.bspa_status { return C.bspa_seq_options_init(&o) }); err != nil {
			return err
		}
		o.extra_key = C.uint64_t(opts.ExtraKey)
		if len(opts.Salt) > 0 {
			salt := C.CBytes(opts.Salt) // the options struct may hold no Go pointer
			defer C.free(salt)
			o.salt = salt
			o.salt_len = C.size_t(len(opts.Salt))
		}
		if err := call(func() C.bspa_status {
			return C.bspa_kv_export_create(&x.e, p.p, &o, tokensPtr(tokens), C.int64_t(len(tokens)))
		}); err != nil {
			return err
		}
		var n C.int64_t
		if err := call(func() C.bspa_status { return C.bspa_kv_export_pages(x.e, nil, nil, 0, &n) }); err != nil {
			C.bspa_kv_export_destroy(x.e)
			return err
		}
		x.Pages = make([]int32, int(n)+1) // never empty, so &x[0] exists
		keys := make([]uint64, 2*int(n)+2)
		err := call(func() C.bspa_status {
			return C.bspa_kv_export_pages(x.e, (*C.int32_t)(unsafe.Pointer(&x.Pages[0])),
				(*C.uint64_t)(unsafe.Pointer(&keys[0])), C.int64_t(len(x.Pages)), &n)
		})
		if err != nil {
			C.bspa_kv_export_destroy(x.e)
			return err
		}
		x.Pages = x.Pages[:int(n)]
		for i := 0; i < int(n); i++ {
			x.Keys = append(x.Keys, [2]uint64{keys[2*i], keys[2*i+1]})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	e := x.e
	p.register(unsafe.Pointer(e), func() { C.bspa_kv_export_destroy(e) })
	runtime.SetFinalizer(x, (*KVExport).Close)
	return x, nil
}

// NumTokens is the exported tokens: pages times the page size.
func (x *KVExport) NumTokens() int { return len(x.Pages) * x.pool.opts.PageSize }

// Close releases the pins (the pages stay cached). Idempotent.
func (x *KVExport) Close() error {
	p := x.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if x.e != nil && p.p != nil {
		C.bspa_kv_export_destroy(x.e)
		delete(p.transfers, unsafe.Pointer(x.e))
	}
	x.e = nil
	runtime.SetFinalizer(x, nil)
	return nil
}

// ImportOptions configure ImportKV. PeerFingerprint is required.
type ImportOptions struct {
	PeerFingerprint uint64      // the exporter's PoolMemory.Fingerprint
	PeerKeys        [][2]uint64 // optional: the exporter's keys, one per full page; checked
	Salt            []byte      // the prompt's salt and extra key, as its sequences use them
	ExtraKey        uint64
}

// KVImport holds pages reserved for the blocks of a prompt this pool lacks: block
// Blocks[i] goes into page Pages[i]. Commit publishes them; Abort or Close frees them.
type KVImport struct {
	pool                 *Pool
	i                    *C.bspa_kv_import
	Pages                []int32
	Blocks               []int64
	NumBlocks, NumCached int64
}

// ImportKV reserves pages for the full pages of tokens this pool lacks, after checking the
// exporter's fingerprint (and keys): ErrInvalidArgument when they differ, ErrOutOfPages
// when the pool cannot hold them. A failed call changes nothing.
func (p *Pool) ImportKV(tokens []int32, opts ImportOptions) (*KVImport, error) {
	m := &KVImport{pool: p}
	err := p.use(func() error {
		var o C.bspa_kv_import_options
		if err := call(func() C.bspa_status { return C.bspa_kv_import_options_init(&o) }); err != nil {
			return err
		}
		o.extra_key = C.uint64_t(opts.ExtraKey)
		o.peer_fingerprint = C.uint64_t(opts.PeerFingerprint)
		if len(opts.Salt) > 0 {
			salt := C.CBytes(opts.Salt)
			defer C.free(salt)
			o.salt = salt
			o.salt_len = C.size_t(len(opts.Salt))
		}
		if opts.PeerKeys != nil {
			flat := make([]uint64, 2*len(opts.PeerKeys)+2)
			for i, k := range opts.PeerKeys {
				flat[2*i], flat[2*i+1] = k[0], k[1]
			}
			keys := C.CBytes(unsafe.Slice((*byte)(unsafe.Pointer(&flat[0])), 8*len(flat)))
			defer C.free(keys)
			o.peer_keys = (*C.uint64_t)(keys)
			o.num_peer_keys = C.int64_t(len(opts.PeerKeys))
		}
		if err := call(func() C.bspa_status {
			return C.bspa_kv_import_create(&m.i, p.p, tokensPtr(tokens), C.int64_t(len(tokens)), &o)
		}); err != nil {
			return err
		}
		var info C.struct_bspa_kv_import_info
		info.version = C.BSPA_KV_IMPORT_INFO_VERSION
		var n C.int64_t
		err := call(func() C.bspa_status { return C.bspa_kv_import_info(m.i, &info) })
		if err == nil {
			m.Pages = make([]int32, int(info.num_reserved)+1)
			m.Blocks = make([]int64, int(info.num_reserved)+1)
			err = call(func() C.bspa_status {
				return C.bspa_kv_import_pages(m.i, (*C.int32_t)(unsafe.Pointer(&m.Pages[0])),
					(*C.int64_t)(unsafe.Pointer(&m.Blocks[0])), C.int64_t(len(m.Pages)), &n)
			})
		}
		if err != nil {
			C.bspa_kv_import_destroy(m.i)
			return err
		}
		m.Pages, m.Blocks = m.Pages[:int(n)], m.Blocks[:int(n)]
		m.NumBlocks, m.NumCached = int64(info.num_blocks), int64(info.num_cached)
		return nil
	})
	if err != nil {
		return nil, err
	}
	i := m.i
	p.register(unsafe.Pointer(i), func() { C.bspa_kv_import_destroy(i) })
	runtime.SetFinalizer(m, (*KVImport).Close)
	return m, nil
}

func (m *KVImport) use(f func() error) error {
	defer runtime.KeepAlive(m)
	return m.pool.use(func() error {
		if m.i == nil {
			return ErrClosed
		}
		return f()
	})
}

// Commit publishes the reserved pages (the transport wrote them all) and returns how many
// entered the prefix index; ErrInvalidState after Commit or Abort.
func (m *KVImport) Commit() (int, error) {
	var published C.int64_t
	err := m.use(func() error { return call(func() C.bspa_status { return C.bspa_kv_import_commit(m.i, &published) }) })
	return int(published), err
}

// Abort frees the reserved pages unpublished; a second Abort is a no-op.
func (m *KVImport) Abort() error {
	return m.use(func() error { return call(func() C.bspa_status { return C.bspa_kv_import_abort(m.i) }) })
}

// Close aborts an open reservation and frees the import. Idempotent.
func (m *KVImport) Close() error {
	p := m.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if m.i != nil && p.p != nil {
		C.bspa_kv_import_destroy(m.i)
		delete(p.transfers, unsafe.Pointer(m.i))
	}
	m.i = nil
	runtime.SetFinalizer(m, nil)
	return nil
}
