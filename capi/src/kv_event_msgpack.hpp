// The pool's queued KV cache events in vLLM's wire format (vllm/distributed/kv_events.py,
// tagged-map events since vLLM PR #42892): a msgpack array [ts, events, data_parallel_rank],
// each event a map whose first key is "type", then the struct's fields in declaration
// order, fields equal to their default left out (msgspec's omit_defaults):
//   {"type": "BlockStored", "block_hashes": [id...], "parent_block_hash": id | nil,
//    "token_ids": [...], "block_size": page_size, "lora_id": extra_key | nil,
//    "medium": "GPU", "lora_name": nil[, "cache_salt": salt], "kv_cache_dtype": dtype}
//   {"type": "BlockRemoved", "block_hashes": [id...], "medium": "GPU"}
//   {"type": "AllBlocksCleared"}
// Integers and strings take msgpack's smallest form, floats float64, as msgspec writes
// them. Consecutive stored pages that continue one chain (each the parent of the next,
// same salt and extra key) share one BlockStored, consecutive removals one BlockRemoved.
// "cache_salt" is not a vLLM field: NVIDIA Dynamo's KV router reads it and mixes it into
// its block hash seed (vLLM carries the salt only inside extra_keys, which Dynamo ignores),
// so another tenant's query never matches the page there. Salts that are not valid UTF-8
// are written as "bspa-hex:" followed by their bytes in lowercase hex. "kv_cache_dtype" is
// not a vLLM field either: the pool's element type in the names of vLLM's --kv-cache-dtype
// and torch ("bfloat16", "float16", "float32", "fp8_e4m3"), so that a router or a KV
// transfer can tell an fp8 worker's pages from a 16-bit one's; decoders of vLLM's structs
// (msgspec, Dynamo's) skip keys they do not know.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cache/event_queue.hpp"
#include "cache/pool.hpp"

namespace bspa::capi {

// Encodes every record of `queue` into out[0, capacity) and returns the bytes the batch
// needs; when that exceeds capacity, out holds only a prefix (the caller reports the size).
// dp_rank < 0 is written as nil. page_size and dtype are the pool's.
size_t encode_kv_event_batch(const cache::EventQueue &queue, int32_t page_size, cache::ElementType dtype, double ts,
                             int32_t dp_rank, unsigned char *out, size_t capacity);

// The salt as the router sees it (see above).
std::string router_salt(const std::string &salt);

}  // namespace bspa::capi
