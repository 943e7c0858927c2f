// Command two_turns runs a two-turn conversation with a shared prefix on the CPU
// backend: the second turn reuses the first turn's cached pages.
//
//	go run ./examples/two_turns
package main

import (
	"fmt"
	"log"
	"math"

	bspa "github.com/bspa-project/bspa/bindings/go"
)

const hq, hkv, dim = 4, 2, 64

// rows stands in for a model's projections: deterministic per position, so the shared
// prefix has the same K/V in both turns.
func rows(start, n, heads int, salt float64) []float32 {
	out := make([]float32, n*heads*dim)
	for i := range out {
		out[i] = float32(math.Sin(float64(start*heads*dim+i)*0.618 + salt))
	}
	return out
}

func turn(pool *bspa.Pool, layout *bspa.Layout, prompt []int32) (int, error) {
	seq, err := pool.NewSequence()
	if err != nil {
		return 0, err
	}
	defer seq.Close() // its full pages stay cached for the next turn
	cached, err := seq.Match(prompt)
	if err != nil {
		return 0, err
	}
	if err := seq.Append(prompt[cached:]); err != nil {
		return 0, err
	}
	n := len(prompt) - cached
	batch, err := pool.NewBatch([]*bspa.Sequence{seq}, []int32{int32(n)}, 0)
	if err != nil {
		return 0, err
	}
	defer batch.Close()
	out := make([]float32, n*hq*dim)
	if err := pool.KVWriteF32(batch, 0, rows(cached, n, hkv, 1), rows(cached, n, hkv, 2)); err != nil {
		return 0, err
	}
	if err := pool.PrefillF32(batch, 0, layout, rows(cached, n, hq, 3), out, 1.0/8, nil); err != nil {
		return 0, err
	}
	if err := seq.Commit(len(prompt)); err != nil {
		return 0, err
	}
	fmt.Printf("prompt %4d tokens: %4d cached, %4d computed, out[0] = %+.4f\n", len(prompt), cached, n, out[0])
	return cached, nil
}

func main() {
	opts := bspa.DefaultPoolOptions()
	opts.DType, opts.NumKVHeads, opts.HeadDim, opts.PageSize, opts.NumPages = bspa.F32, hkv, dim, 16, 64
	pool, err := bspa.NewPool(opts)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	layout, err := bspa.NewStridedLayout(bspa.StridedOptions{BlockSize: 16, LocalBlocks: 4, VertStride: 4,
		NumHeadsTotal: hq, NumHeads: hq})
	if err != nil {
		log.Fatal(err)
	}
	defer layout.Close()

	first := make([]int32, 300)
	for i := range first {
		first[i] = int32(i * 7919 % 32000)
	}
	second := append([]int32(nil), first...)
	for i := 0; i < 120; i++ {
		second = append(second, int32(1000+i))
	}
	if _, err := turn(pool, layout, first); err != nil {
		log.Fatal(err)
	}
	cached, err := turn(pool, layout, second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("cached tokens in turn 2: %d\n", cached)
	stats, err := pool.Stats()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("pool: %d hits, %d matched tokens of %d queried\n", stats.Hits, stats.MatchedTokens, stats.QueriedTokens)
}
