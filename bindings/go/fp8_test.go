package bspa_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	bspa "github.com/bspa-project/bspa/bindings/go"
)

func bf16(x float32) uint16 {
	b := math.Float32bits(x)
	return uint16((b + 0x7fff + ((b >> 16) & 1)) >> 16)
}

func newFP8Pool(t *testing.T) *bspa.Pool {
	t.Helper()
	opts := bspa.DefaultPoolOptions()
	opts.DType, opts.NumKVHeads, opts.HeadDim, opts.PageSize, opts.NumPages, opts.NumLayers = bspa.FP8E4M3, hkv, dim, page, 8, 2
	pool, err := bspa.NewPool(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool
}

func TestFP8ScalesRoundTripAndErrors(t *testing.T) {
	pool := newFP8Pool(t)
	if _, _, err := pool.KVScales(0); !errors.Is(err, bspa.ErrInvalidState) {
		t.Fatalf("scales of a layer never set: %v", err)
	}
	must(t, pool.SetKVScales(1, []float32{0.5, 0.25}, []float32{1, 2}))
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), 0, -1} {
		err := pool.SetKVScales(1, []float32{0.5, bad}, []float32{1, 1})
		if !errors.Is(err, bspa.ErrInvalidArgument) || !strings.Contains(err.Error(), "layer 1") {
			t.Fatalf("scale %v: %v", bad, err)
		}
	}
	if err := pool.SetKVScales(1, []float32{1, 1, 1}, []float32{1, 1, 1}); !errors.Is(err, bspa.ErrInvalidArgument) {
		t.Fatalf("three scales for two heads: %v", err)
	}
	if err := pool.SetKVScales(2, []float32{1, 1}, []float32{1, 1}); !errors.Is(err, bspa.ErrOutOfRange) {
		t.Fatalf("layer 2 of 2: %v", err)
	}
	k, v, err := pool.KVScales(1)
	must(t, err)
	if k[0] != 0.5 || k[1] != 0.25 || v[0] != 1 || v[1] != 2 {
		t.Fatalf("scales changed by failed calls: %v %v", k, v)
	}
	info, err := pool.Info()
	must(t, err)
	if info.DType != bspa.FP8E4M3 || info.KVScalesLayers != 1 || info.PageBytes != 2*2*hkv*page*dim {
		t.Fatalf("info %+v", info)
	}
	if !strings.Contains(bspa.BuildInfo(), "fp8_e4m3") {
		t.Fatal(bspa.BuildInfo())
	}
}

// One key per query: each output row is its KV head's V, dequantized exactly; then the same
// attention through PrefillPaged over caller-owned e4m3 pages with scale slices.
func TestFP8WriteAndPrefill(t *testing.T) {
	pool := newFP8Pool(t)
	seq, err := pool.NewSequence()
	must(t, err)
	must(t, seq.Append([]int32{7}))
	b, err := pool.NewBatch([]*bspa.Sequence{seq}, []int32{1}, 0)
	must(t, err)
	defer b.Close()
	kv := make([]uint16, hkv*dim)
	vals := []float32{1, -0.5, 448, 1000, -3.5}
	for i, x := range vals {
		kv[i] = bf16(x)
	}
	k16 := bspa.Host16(kv, bspa.BF16, 1, hkv, dim)
	if err := pool.KVWrite(b, 0, k16, k16, 0); !errors.Is(err, bspa.ErrInvalidState) {
		t.Fatalf("kv write without scales: %v", err)
	}
	must(t, pool.SetKVScales(0, []float32{1, 1}, []float32{1, 1}))
	zero := make([]uint16, hkv*dim)
	must(t, pool.KVWrite(b, 0, bspa.Host16(zero, bspa.BF16, 1, hkv, dim), k16, 0))
	q := make([]uint16, hq*dim)
	out := make([]uint16, hq*dim)
	l, err := bspa.NewDenseLayout(hq)
	must(t, err)
	defer l.Close()
	must(t, pool.Prefill(b, 0, l, bspa.Host16(q, bspa.BF16, 1, hq, dim), bspa.Host16(out, bspa.BF16, 1, hq, dim), 0.1, nil, 0))
	want := []float32{1, -0.5, 448, 448, -3.5}
	for i, w := range want {
		if got := math.Float32frombits(uint32(out[i]) << 16); got != w {
			t.Fatalf("out[%d] = %v, want %v", i, got, w)
		}
	}

	// Caller pages: every byte 0x30 (0.5), scales per head.
	pages := make([]byte, 2*hkv*page*dim)
	for i := range pages {
		pages[i] = 0x30
	}
	ks, vs := []float32{1, 1}, []float32{2, 4}
	out2 := make([]uint16, 3*hq*dim)
	q2 := make([]uint16, 3*hq*dim)
	kt, vt := bspa.HostF32(ks, hkv), bspa.HostF32(vs, hkv)
	must(t, bspa.PrefillPaged(bspa.PagedArgs{
		Q: bspa.Host16(q2, bspa.BF16, 3, hq, dim), Out: bspa.Host16(out2, bspa.BF16, 3, hq, dim),
		KPages: bspa.HostFP8(pages, 2, hkv, page, dim), VPages: bspa.HostFP8(pages, 2, hkv, page, dim),
		BlockTable: bspa.HostI32([]int32{1, 0}, 1, 2), QueryStarts: bspa.HostI32([]int32{0, 3}, 2),
		ContextLens: bspa.HostI32([]int32{17}, 1), MaxQueryLen: 3, Layout: l, Scale: 0.1, KScale: &kt, VScale: &vt,
	}, 0))
	for h := 0; h < hq; h++ {
		w := 0.5 * vs[h/(hq/hkv)]
		if got := math.Float32frombits(uint32(out2[h*dim]) << 16); got != w {
			t.Fatalf("paged head %d: %v, want %v", h, got, w)
		}
	}
	err = bspa.PrefillPaged(bspa.PagedArgs{
		Q: bspa.Host16(q2, bspa.BF16, 3, hq, dim), Out: bspa.Host16(out2, bspa.BF16, 3, hq, dim),
		KPages: bspa.HostFP8(pages, 2, hkv, page, dim), VPages: bspa.HostFP8(pages, 2, hkv, page, dim),
		BlockTable: bspa.HostI32([]int32{1, 0}, 1, 2), QueryStarts: bspa.HostI32([]int32{0, 3}, 2),
		ContextLens: bspa.HostI32([]int32{17}, 1), MaxQueryLen: 3, Layout: l, Scale: 0.1,
	}, 0)
	if !errors.Is(err, bspa.ErrNullPointer) {
		t.Fatalf("fp8 pages without scales: %v", err)
	}
}
