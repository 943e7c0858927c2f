//! KV cache events through the safe crate: stored pages chained by block id with their
//! tokens and salt, removals on eviction, the overflow that clears, errors, and the msgpack
//! batch decoded and compared with the structured drain of a twin pool.

use bspa::{ErrorKind, KvEvent, Pool, PoolOptions};

const PAGE: i32 = 16;

fn events_pool(num_pages: i64, events_capacity: i64) -> Pool {
    // num_layers 0: bookkeeping and prefix lookup only, no KV storage.
    Pool::new(&PoolOptions { num_layers: 0, page_size: PAGE, num_pages, events_capacity, ..Default::default() })
        .expect("pool")
}

/// Serves one prompt the way an engine does (match, append the rest, commit), then drops
/// the sequence; returns the cached prefix length.
fn serve(pool: &Pool, salt: &[u8], tokens: &[i32]) -> usize {
    let seq = pool.sequence_with(salt, 0).expect("sequence");
    let cached = seq.match_prefix(tokens).expect("match");
    seq.append(&tokens[cached..]).expect("append");
    seq.commit(tokens.len()).expect("commit");
    cached
}

fn run(base: i32, n: i32) -> Vec<i32> {
    (base..base + n).collect()
}

#[test]
fn events_are_off_by_default() {
    assert_eq!(PoolOptions::default().events_capacity, 0);
    let pool = events_pool(8, 0);
    let err = pool.drain_events().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidState, "{}", err);
    assert!(err.message().contains("events"), "the message says why: {}", err.message());
    let err = pool.drain_events_msgpack(0.0, None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidState, "{}", err);
}

#[test]
fn a_bad_capacity_is_refused_at_creation() {
    for capacity in [-1i64, 1 << 40] {
        let err =
            Pool::new(&PoolOptions { num_layers: 0, num_pages: 8, events_capacity: capacity, ..Default::default() })
                .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "capacity {}: {}", capacity, err);
        assert!(err.message().contains("events_capacity"), "{}", err.message());
    }
}

#[test]
fn commit_stores_pages_chained_by_block_id() {
    let pool = events_pool(16, 64);
    let prompt = run(1000, 56); // 3 full pages and 8 tokens
    serve(&pool, b"tenant-a", &prompt);
    let events = pool.drain_events().expect("drain");
    assert_eq!(events.len(), 3, "{:?}", events);
    let mut parent = 0u64;
    for (i, e) in events.iter().enumerate() {
        match e {
            KvEvent::Stored { page, block_id, parent_block_id, key_lo, key_hi, extra_key, tokens, salt } => {
                assert_eq!(*block_id, (1u64 << 32) | *page as u64, "generation 1: the page's first use");
                assert_eq!(*parent_block_id, parent);
                assert!(*key_lo != 0 || *key_hi != 0);
                assert_eq!(*extra_key, 0);
                assert_eq!(tokens[..], prompt[i * 16..i * 16 + 16]);
                assert_eq!(salt, b"tenant-a");
                parent = *block_id;
            }
            other => panic!("event {}: {:?}", i, other),
        }
    }
    // A hit publishes nothing: the queue drains empty.
    assert_eq!(serve(&pool, b"tenant-a", &prompt), 48);
    assert!(pool.drain_events().expect("drain").is_empty());
    pool.check().expect("invariants");
}

#[test]
fn eviction_removes_what_was_stored() {
    let pool = events_pool(4, 64);
    serve(&pool, &[], &run(1000, 64));
    let stored: Vec<u64> = pool
        .drain_events()
        .expect("drain")
        .iter()
        .map(|e| match e {
            KvEvent::Stored { block_id, salt, .. } => {
                assert!(salt.is_empty());
                *block_id
            }
            other => panic!("{:?}", other),
        })
        .collect();
    assert_eq!(stored.len(), 4);
    serve(&pool, &[], &run(9000, 32)); // evicts two pages, the chain's tail first
    let events = pool.drain_events().expect("drain");
    assert_eq!(events.len(), 4, "2 removed, 2 stored: {:?}", events);
    assert_eq!(events[0], KvEvent::Removed { page: (stored[3] & 0xffff_ffff) as i32, block_id: stored[3] });
    assert_eq!(events[1], KvEvent::Removed { page: (stored[2] & 0xffff_ffff) as i32, block_id: stored[2] });
    for e in &events[2..] {
        assert!(matches!(e, KvEvent::Stored { block_id, .. } if block_id >> 32 == 2), "a reused page: {:?}", e);
    }
}

#[test]
fn overflow_clears_and_what_follows_is_what_the_pool_holds() {
    let pool = events_pool(8, 2);
    serve(&pool, b"x", &run(5, 64)); // 4 stored records into a queue of 2
    let events = pool.drain_events().expect("drain");
    assert_eq!(events.first(), Some(&KvEvent::AllCleared), "{:?}", events);
    // What a router holds after the clear: the announced pages it can reach from a chain's
    // first page (it drops a store whose parent it never saw). Here the clear unpublished
    // the chain's first page, so a later page announced after it is unreachable.
    let mut reachable: Vec<u64> = Vec::new();
    for e in &events[1..] {
        if let KvEvent::Stored { block_id, parent_block_id, .. } = e {
            if *parent_block_id == 0 || reachable.contains(parent_block_id) {
                reachable.push(*block_id);
            }
        }
    }
    // The pool matches exactly that (one token more than the 4 pages, since a match never
    // takes the last token).
    let seq = pool.sequence_with(b"x", 0).expect("sequence");
    assert_eq!(seq.match_prefix(&run(5, 65)).expect("match"), reachable.len() * PAGE as usize, "{:?}", events);
    pool.check().expect("invariants");
}

#[test]
fn msgpack_rejects_a_non_finite_ts_and_loses_nothing() {
    let pool = events_pool(8, 64);
    serve(&pool, &[], &run(0, 32));
    for ts in [f64::NAN, f64::INFINITY] {
        let err = pool.drain_events_msgpack(ts, Some(0)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", err);
    }
    assert_eq!(pool.drain_events().expect("drain").len(), 2, "the failed drains kept the events");
}

#[test]
fn an_empty_batch_is_ts_no_events_and_the_rank() {
    let pool = events_pool(8, 64);
    let batch = pool.drain_events_msgpack(1.0, None).expect("drain");
    // fixarray(3), float64 1.0, fixarray(0), nil
    assert_eq!(batch, [0x93, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x90, 0xc0]);
    assert_eq!(*pool.drain_events_msgpack(1.0, Some(3)).expect("drain").last().unwrap(), 3);
    assert_eq!(*pool.drain_events_msgpack(1.0, Some(-1)).expect("drain").last().unwrap(), 0xc0);
}

/// Drives two pools through the same steps (stores, a hit, evictions, two tenants, an
/// extra key, a batch large enough to grow the 64 KiB first buffer) and checks that the
/// msgpack batch of one says what the structured events of the other say.
#[test]
fn msgpack_batch_matches_the_structured_events() {
    let (a, b) = (events_pool(64, 4096), events_pool(64, 4096));
    for pool in [&a, &b] {
        serve(pool, b"tenant-a", &run(100, 100));
        serve(pool, b"tenant-a", &run(100, 120)); // a hit, then one more page
        serve(pool, b"\xff\x00not utf-8", &run(100, 64));
        let seq = pool.sequence_with(&[], 42).expect("sequence");
        seq.append(&run(7, 33)).expect("append");
        seq.commit(33).expect("commit");
        drop(seq);
        for i in 0..300 {
            // Evicts: removals between stores. Tokens past 65535 take 5 bytes each, so
            // the batch passes 64 KiB.
            serve(pool, &[], &run(100_000 * (i + 1), 48));
        }
        serve(pool, &[], &run(1 << 20, 16 * 60)); // one chain of 60 pages: 60 * 16 tokens
    }
    let events = a.drain_events().expect("drain");
    let batch = b.drain_events_msgpack(1234.5, Some(0)).expect("drain msgpack");
    assert!(batch.len() > 1 << 16, "the batch outgrew the first buffer ({} bytes)", batch.len());
    assert!(events.iter().any(|e| matches!(e, KvEvent::Removed { .. })));

    let mut r = Reader { b: &batch, i: 0 };
    let top = r.value();
    assert_eq!(r.i, batch.len(), "one value, nothing after it");
    let top = top.array();
    assert_eq!(top.len(), 3);
    assert_eq!(top[0], Value::F64(1234.5));
    assert_eq!(top[2], Value::Int(0));

    // Expand the batch's grouped maps back into one record per page.
    let mut expanded = Vec::new();
    for m in top[1].array() {
        let get = |k: &str| m.map().iter().find(|(key, _)| key.str() == k).map(|(_, v)| v.clone());
        match get("type").expect("type").str() {
            "AllBlocksCleared" => expanded.push(KvEvent::AllCleared),
            "BlockRemoved" => {
                assert_eq!(get("medium").unwrap().str(), "GPU");
                for h in get("block_hashes").unwrap().array() {
                    let id = h.uint();
                    expanded.push(KvEvent::Removed { page: (id & 0xffff_ffff) as i32, block_id: id });
                }
            }
            "BlockStored" => {
                assert_eq!(get("block_size").unwrap(), Value::Int(PAGE as i64));
                assert_eq!(get("medium").unwrap().str(), "GPU");
                assert_eq!(get("lora_name").unwrap(), Value::Nil);
                assert_eq!(get("kv_cache_dtype").unwrap().str(), "float32", "the pool's dtype (f32, the default)");
                let extra_key = match get("lora_id").unwrap() {
                    Value::Nil => 0,
                    v => v.uint(),
                };
                let salt = match get("cache_salt") {
                    None => Vec::new(),
                    Some(v) => match v.str().strip_prefix("bspa-hex:") {
                        Some(hex) => {
                            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
                        }
                        None => v.str().as_bytes().to_vec(),
                    },
                };
                let tokens: Vec<i32> = get("token_ids").unwrap().array().iter().map(|t| t.uint() as i32).collect();
                let mut parent = match get("parent_block_hash").unwrap() {
                    Value::Nil => 0,
                    v => v.uint(),
                };
                let hashes = get("block_hashes").unwrap();
                assert_eq!(tokens.len(), hashes.array().len() * PAGE as usize);
                for (k, h) in hashes.array().iter().enumerate() {
                    let id = h.uint();
                    expanded.push(
                        (id, parent, extra_key, tokens[k * 16..k * 16 + 16].to_vec(), salt.clone()).into_stored(),
                    );
                    parent = id;
                }
            }
            other => panic!("unknown event type {}", other),
        }
    }
    // The structured events without what the batch does not carry (the page keys).
    let comparable: Vec<KvEvent> = events
        .into_iter()
        .map(|e| match e {
            KvEvent::Stored { block_id, parent_block_id, extra_key, tokens, salt, .. } => {
                (block_id, parent_block_id, extra_key, tokens, salt).into_stored()
            }
            e => e,
        })
        .collect();
    assert_eq!(expanded.len(), comparable.len());
    for (i, (x, y)) in expanded.iter().zip(&comparable).enumerate() {
        assert_eq!(x, y, "event {}", i);
    }
}

trait IntoStored {
    fn into_stored(self) -> KvEvent;
}
impl IntoStored for (u64, u64, u64, Vec<i32>, Vec<u8>) {
    fn into_stored(self) -> KvEvent {
        let (block_id, parent_block_id, extra_key, tokens, salt) = self;
        KvEvent::Stored {
            page: (block_id & 0xffff_ffff) as i32,
            block_id,
            parent_block_id,
            key_lo: 0,
            key_hi: 0,
            extra_key,
            tokens,
            salt,
        }
    }
}

/// The msgpack subset an EventBatch uses (no crate: the workspace depends on nothing).
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Nil,
    Int(i64),
    UInt(u64),
    F64(f64),
    Str(String),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

impl Value {
    fn array(&self) -> &[Value] {
        match self {
            Value::Array(a) => a,
            v => panic!("not an array: {:?}", v),
        }
    }
    fn map(&self) -> &[(Value, Value)] {
        match self {
            Value::Map(m) => m,
            v => panic!("not a map: {:?}", v),
        }
    }
    fn str(&self) -> &str {
        match self {
            Value::Str(s) => s,
            v => panic!("not a string: {:?}", v),
        }
    }
    fn uint(&self) -> u64 {
        match *self {
            Value::Int(i) if i >= 0 => i as u64,
            Value::UInt(u) => u,
            ref v => panic!("not an unsigned integer: {:?}", v),
        }
    }
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.b[self.i..self.i + n];
        self.i += n;
        s
    }
    fn be(&mut self, n: usize) -> u64 {
        self.take(n).iter().fold(0u64, |acc, &x| (acc << 8) | x as u64)
    }
    fn items(&mut self, n: usize) -> Vec<Value> {
        (0..n).map(|_| self.value()).collect()
    }
    fn pairs(&mut self, n: usize) -> Vec<(Value, Value)> {
        (0..n).map(|_| (self.value(), self.value())).collect()
    }
    fn string(&mut self, n: usize) -> Value {
        Value::Str(String::from_utf8(self.take(n).to_vec()).expect("msgpack str is UTF-8"))
    }
    fn value(&mut self) -> Value {
        let tag = self.take(1)[0];
        match tag {
            0x00..=0x7f => Value::Int(tag as i64),
            0x80..=0x8f => Value::Map(self.pairs((tag & 0x0f) as usize)),
            0x90..=0x9f => Value::Array(self.items((tag & 0x0f) as usize)),
            0xa0..=0xbf => self.string((tag & 0x1f) as usize),
            0xc0 => Value::Nil,
            0xcb => Value::F64(f64::from_bits(self.be(8))),
            0xcc => Value::Int(self.be(1) as i64),
            0xcd => Value::Int(self.be(2) as i64),
            0xce => Value::Int(self.be(4) as i64),
            0xcf => Value::UInt(self.be(8)),
            0xd9 => {
                let n = self.be(1) as usize;
                self.string(n)
            }
            0xda => {
                let n = self.be(2) as usize;
                self.string(n)
            }
            0xdc => {
                let n = self.be(2) as usize;
                Value::Array(self.items(n))
            }
            0xdd => {
                let n = self.be(4) as usize;
                Value::Array(self.items(n))
            }
            0xde => {
                let n = self.be(2) as usize;
                Value::Map(self.pairs(n))
            }
            0xe0..=0xff => Value::Int(tag as i8 as i64),
            other => panic!("msgpack tag {:#x} at byte {} is not one an EventBatch uses", other, self.i - 1),
        }
    }
}
