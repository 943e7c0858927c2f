package bspa_test

import (
	"bytes"
	"errors"
	"testing"

	bspa "github.com/bspa-project/bspa/bindings/go"
)

func TestDrainEvents(t *testing.T) {
	pool, err := bspa.NewPool(bspa.PoolOptions{BookkeepingOnly: true, PageSize: 16, NumPages: 8, EventsCapacity: 64})
	must(t, err)
	defer pool.Close()
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(1000 + i)
	}
	seq, err := pool.NewSequenceWith(bspa.SequenceOptions{Salt: []byte("tenant-a")})
	must(t, err)
	must(t, seq.Append(prompt))
	must(t, seq.Commit(len(prompt)))
	must(t, seq.Close())
	events, err := pool.DrainEvents()
	must(t, err)
	if len(events) != 2 {
		t.Fatalf("%d events, want 2 stored pages", len(events))
	}
	for i, e := range events {
		if e.Type != bspa.EventStored || string(e.Salt) != "tenant-a" || len(e.Tokens) != 16 || e.Tokens[0] != int32(1000+16*i) {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
	if events[0].ParentBlockID != 0 || events[1].ParentBlockID != events[0].BlockID {
		t.Fatalf("parents %x %x, block %x", events[0].ParentBlockID, events[1].ParentBlockID, events[0].BlockID)
	}
	batch, err := pool.DrainEventsMsgpack(1.0, -1)
	must(t, err)
	if len(batch) != 12 || batch[0] != 0x93 || batch[10] != 0x90 || batch[11] != 0xc0 {
		t.Fatalf("an empty batch is [ts, [], nil], got % x", batch)
	}
	off, err := bspa.NewPool(bspa.PoolOptions{BookkeepingOnly: true, PageSize: 16, NumPages: 8})
	must(t, err)
	defer off.Close()
	if _, err := off.DrainEvents(); !errors.Is(err, bspa.ErrInvalidState) {
		t.Fatalf("a pool without events: %v", err)
	}
}

// Every stored page's map in the msgpack batch names the pool's dtype (bspa's own key).
func TestDrainEventsMsgpackSaysTheDType(t *testing.T) {
	pool, err := bspa.NewPool(bspa.PoolOptions{BookkeepingOnly: true, DType: bspa.FP8E4M3, PageSize: 16, NumPages: 8, EventsCapacity: 64})
	must(t, err)
	defer pool.Close()
	seq, err := pool.NewSequence()
	must(t, err)
	prompt := make([]int32, 16)
	must(t, seq.Append(prompt))
	must(t, seq.Commit(len(prompt)))
	must(t, seq.Close())
	batch, err := pool.DrainEventsMsgpack(1.0, -1)
	must(t, err)
	if !bytes.Contains(batch, []byte("\xaekv_cache_dtype\xa8fp8_e4m3")) {
		t.Fatalf("no kv_cache_dtype fp8_e4m3 in % x", batch)
	}
}
