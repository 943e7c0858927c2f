package bspa

/*
#include <bspa/bspa.h>
*/
import "C"

import (
	"errors"
	"unsafe"
)

// KV cache events (bspa.h, "KV cache events"): a pool made with PoolOptions.EventsCapacity
// > 0 records what enters and leaves its prefix index, for a KV-aware router to mirror.

// EventType says what happened to a page.
type EventType int32

const (
	EventStored     EventType = C.BSPA_KV_EVENT_STORED      // a page entered the prefix index
	EventRemoved    EventType = C.BSPA_KV_EVENT_REMOVED     // a published page left it (evicted)
	EventAllCleared EventType = C.BSPA_KV_EVENT_ALL_CLEARED // the queue overflowed: forget everything before
)

// Event is one drained KV cache event. Tokens and Salt are copies (Stored only).
type Event struct {
	Type          EventType
	Page          int32  // the pool's page id; -1 for EventAllCleared
	BlockID       uint64 // (generation << 32) | page: unique over the pool's life, never 0
	ParentBlockID uint64 // Stored: the parent's BlockID, 0 for a chain's first page
	KeyLo, KeyHi  uint64 // Stored: the page key
	ExtraKey      uint64 // Stored: the sequence's extra key
	Tokens        []int32
	Salt          []byte
}

// DrainEvents takes every queued event, oldest first (the queue is then empty). A pool
// made without events gives ErrInvalidState.
func (p *Pool) DrainEvents() ([]Event, error) {
	var out []Event
	err := p.use(func() error {
		for {
			var n, nt C.int64_t
			if err := call(func() C.bspa_status { return C.bspa_pool_events_drain(p.p, nil, 0, nil, 0, &n, &nt) }); err != nil {
				return err
			}
			ev := make([]C.bspa_kv_event, int(n)+1) // +1: never empty, so never a size query
			tok := make([]C.int32_t, int(nt)+1)
			err := call(func() C.bspa_status {
				return C.bspa_pool_events_drain(p.p, &ev[0], C.int64_t(len(ev)), &tok[0], C.int64_t(len(tok)), &n, &nt)
			})
			if errors.Is(err, ErrBufferTooSmall) {
				continue // events recorded since the size query
			}
			if err != nil {
				return err
			}
			page := p.opts.PageSize
			out = make([]Event, int(n))
			for i := range out {
				e := &ev[i]
				out[i] = Event{Type: EventType(e._type), Page: int32(e.page), BlockID: uint64(e.block_id),
					ParentBlockID: uint64(e.parent_block_id), KeyLo: uint64(e.key_lo), KeyHi: uint64(e.key_hi),
					ExtraKey: uint64(e.extra_key)}
				if out[i].Type == EventStored {
					out[i].Tokens = make([]int32, page)
					for j := 0; j < page; j++ {
						out[i].Tokens[j] = int32(tok[int(e.token_offset)+j])
					}
					if e.salt_len > 0 {
						out[i].Salt = C.GoBytes(e.salt, C.int(e.salt_len))
					}
				}
			}
			return nil
		}
	})
	return out, err
}

// DrainEventsMsgpack takes every queued event as one msgpack-encoded vLLM EventBatch,
// [ts, events, dpRank] (dpRank < 0 is nil), the payload frame a ZMQ PUB publisher sends
// after the topic and an 8-byte big-endian sequence number (see bspa.h).
func (p *Pool) DrainEventsMsgpack(ts float64, dpRank int32) ([]byte, error) {
	var out []byte
	err := p.use(func() error {
		buf := make([]byte, 1<<16)
		for {
			var size C.size_t
			err := call(func() C.bspa_status {
				return C.bspa_pool_events_drain_msgpack(p.p, C.double(ts), C.int32_t(dpRank), unsafe.Pointer(&buf[0]),
					C.size_t(len(buf)), &size)
			})
			if errors.Is(err, ErrBufferTooSmall) {
				buf = make([]byte, int(size)+int(size)/2)
				continue
			}
			if err != nil {
				return err
			}
			out = buf[:int(size)]
			return nil
		}
	})
	return out, err
}
