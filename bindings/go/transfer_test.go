package bspa_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"unsafe"

	bspa "github.com/bspa-project/bspa/bindings/go"
)

const xLayers = 2

func xPool(t *testing.T, pages int64, headDim int) *bspa.Pool {
	t.Helper()
	opts := bspa.DefaultPoolOptions()
	opts.DType, opts.NumKVHeads, opts.HeadDim, opts.PageSize, opts.NumPages = bspa.F32, hkv, headDim, page, pages
	opts.NumLayers = xLayers
	pool, err := bspa.NewPool(opts)
	must(t, err)
	t.Cleanup(func() { pool.Close() })
	return pool
}

// xRows is deterministic per (position, layer, which): every pool computes the same KV.
func xRows(start, n, heads, layer, which int) []float32 {
	out := make([]float32, n*heads*dim)
	for i := range out {
		out[i] = float32(math.Sin(float64(start*heads*dim+i)*0.618 + float64(10*layer+which)))
	}
	return out
}

// xTurn matches tokens, computes the rest on every layer and returns (cached, outputs).
func xTurn(t *testing.T, pool *bspa.Pool, layout *bspa.Layout, tokens []int32) (int, []float32) {
	t.Helper()
	seq, err := pool.NewSequence()
	must(t, err)
	defer seq.Close()
	cached, err := seq.Match(tokens)
	must(t, err)
	must(t, seq.Append(tokens[cached:]))
	n := len(tokens) - cached
	batch, err := pool.NewBatch([]*bspa.Sequence{seq}, []int32{int32(n)}, 0)
	must(t, err)
	var all []float32
	for l := 0; l < xLayers; l++ {
		out := make([]float32, n*hq*dim)
		must(t, pool.KVWriteF32(batch, l, xRows(cached, n, hkv, l, 1), xRows(cached, n, hkv, l, 2)))
		must(t, pool.PrefillF32(batch, l, layout, xRows(cached, n, hq, l, 3), out, 0.125, nil))
		all = append(all, out...)
	}
	batch.Close()
	must(t, seq.Commit(len(tokens)))
	return cached, all
}

// xCopy is the transport: every reserved block's pages from the exporter's to the importer's.
func xCopy(t *testing.T, src *bspa.Pool, x *bspa.KVExport, dst *bspa.Pool, m *bspa.KVImport) {
	ms, err := src.Memory()
	must(t, err)
	md, err := dst.Memory()
	must(t, err)
	var srcPages []int32
	for _, b := range m.Blocks {
		srcPages = append(srcPages, x.Pages[b])
	}
	from, ok1 := ms.PageDescs(srcPages)
	to, ok2 := md.PageDescs(m.Pages)
	if !ok1 || !ok2 || len(from) != len(to) {
		t.Fatalf("descriptor lists: %v %v %d %d", ok1, ok2, len(from), len(to))
	}
	// The copy goes through the pools' storage slices (UnsafeWithKVF32); the descriptors must
	// name exactly those bytes.
	per := int(ms.PageBytes / 4) // floats per page of one region
	for l := 0; l < xLayers; l++ {
		must(t, src.UnsafeWithKVF32(l, func(sk, sv []float32) error {
			return dst.UnsafeWithKVF32(l, func(dk, dv []float32) error {
				for i, b := range m.Blocks {
					sp, dp := int(x.Pages[b]), int(m.Pages[i])
					for kv, pair := range [][2][]float32{{sk, dk}, {sv, dv}} {
						d := i*2*xLayers + 2*l + kv
						if uint64(uintptr(unsafe.Pointer(&pair[0][sp*per]))) != from[d].Addr ||
							uint64(uintptr(unsafe.Pointer(&pair[1][dp*per]))) != to[d].Addr {
							t.Errorf("descriptor %d does not name block %d's page of layer %d", d, b, l)
						}
						copy(pair[1][dp*per:(dp+1)*per], pair[0][sp*per:(sp+1)*per])
					}
				}
				return nil
			})
		}))
	}
}

func xPrompt(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i * 7919 % 32000)
	}
	return out
}

func TestKVTransferRoundtripHitsBitwise(t *testing.T) {
	layout, err := bspa.NewDenseLayout(hq)
	must(t, err)
	defer layout.Close()
	exporter, importer := xPool(t, 48, dim), xPool(t, 20, dim)
	prompt := xPrompt(7*page + 5)
	xTurn(t, exporter, layout, prompt)
	other := xPrompt(3 * page)
	for i := range other {
		other[i] += 100000
	}
	xTurn(t, importer, layout, other) // fragments the importer

	x, err := exporter.ExportKV(prompt, bspa.SequenceOptions{})
	must(t, err)
	defer x.Close()
	if len(x.Pages) != 7 || x.NumTokens() != 7*page {
		t.Fatalf("exported %d pages, want 7 (no n-1 cap)", len(x.Pages))
	}
	ms, err := exporter.Memory()
	must(t, err)
	if a, _ := ms.PageAddress(1, bspa.V, 2); a == 0 {
		t.Fatal("no address")
	}
	a1, _ := ms.PageAddress(1, bspa.V, 2)
	a2, err := exporter.PageAddress(1, bspa.V, 2)
	must(t, err)
	if a1 != a2 {
		t.Fatalf("PageAddress %x != bspa_pool_page_address %x", a1, a2)
	}
	m, err := importer.ImportKV(prompt[:x.NumTokens()], bspa.ImportOptions{PeerFingerprint: ms.Fingerprint, PeerKeys: x.Keys})
	must(t, err)
	if m.NumBlocks != 7 || m.NumCached != 0 || len(m.Pages) != 7 {
		t.Fatalf("import: %d blocks, %d cached, %d pages", m.NumBlocks, m.NumCached, len(m.Pages))
	}
	xCopy(t, exporter, x, importer, m)
	n, err := m.Commit()
	must(t, err)
	if n != 7 {
		t.Fatalf("published %d", n)
	}
	must(t, m.Close())
	must(t, importer.Check())

	next := append(append([]int32{}, prompt...), 40000, 40001, 40002, 40003, 40004, 40005)
	ca, oa := xTurn(t, exporter, layout, next)
	cb, ob := xTurn(t, importer, layout, next)
	if ca != 7*page || cb != 7*page {
		t.Fatalf("cached %d and %d, want %d", ca, cb, 7*page)
	}
	for i := range oa {
		if math.Float32bits(oa[i]) != math.Float32bits(ob[i]) {
			t.Fatalf("output %d differs: %v vs %v", i, oa[i], ob[i])
		}
	}
}

func TestKVImportAbortAndErrors(t *testing.T) {
	layout, err := bspa.NewDenseLayout(hq)
	must(t, err)
	defer layout.Close()
	exporter, importer := xPool(t, 16, dim), xPool(t, 16, dim)
	prompt := xPrompt(4 * page)
	xTurn(t, exporter, layout, prompt)
	ms, err := exporter.Memory()
	must(t, err)
	before, err := importer.Stats()
	must(t, err)
	m, err := importer.ImportKV(prompt, bspa.ImportOptions{PeerFingerprint: ms.Fingerprint})
	must(t, err)
	must(t, m.Abort())
	must(t, m.Abort()) // a no-op
	if _, err := m.Commit(); !errors.Is(err, bspa.ErrInvalidState) {
		t.Fatalf("commit after abort: %v", err)
	}
	must(t, m.Close())
	if _, err := m.Commit(); err != bspa.ErrClosed {
		t.Fatalf("commit after close: %v", err)
	}
	after, err := importer.Stats()
	must(t, err)
	if before != after {
		t.Fatalf("stats changed: %+v -> %+v", before, after)
	}
	must(t, importer.Check())

	other := xPool(t, 16, 2*dim)
	_, err = other.ImportKV(prompt, bspa.ImportOptions{PeerFingerprint: ms.Fingerprint})
	if !errors.Is(err, bspa.ErrInvalidArgument) || !strings.Contains(err.Error(), "peer_fingerprint") {
		t.Fatalf("mismatched fingerprint: %v", err)
	}
	_, err = importer.ImportKV(prompt, bspa.ImportOptions{PeerFingerprint: ms.Fingerprint, PeerKeys: make([][2]uint64, 4)})
	if !errors.Is(err, bspa.ErrInvalidArgument) || !strings.Contains(err.Error(), "peer_keys[0]") {
		t.Fatalf("wrong keys: %v", err)
	}
	if _, err := importer.PageAddress(xLayers, bspa.K, 0); !errors.Is(err, bspa.ErrOutOfRange) {
		t.Fatalf("page address out of range: %v", err)
	}
	// Closing the pool aborts an open import and frees exports; their handles are closed.
	m, err = importer.ImportKV(prompt, bspa.ImportOptions{PeerFingerprint: ms.Fingerprint})
	must(t, err)
	x, err := exporter.ExportKV(prompt, bspa.SequenceOptions{})
	must(t, err)
	importer.Close()
	exporter.Close()
	if _, err := m.Commit(); err != bspa.ErrClosed {
		t.Fatalf("commit after the pool closed: %v", err)
	}
	must(t, m.Close())
	must(t, x.Close())
}
