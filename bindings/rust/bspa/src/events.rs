//! KV cache events (bspa.h, "KV cache events"): a pool made with
//! [`PoolOptions::events_capacity`](crate::PoolOptions::events_capacity) > 0 records what
//! enters and leaves its prefix index, for a KV-aware router to mirror. The runtime drains
//! them when it likes (e.g. once per engine step): as [`KvEvent`]s for a router of its own,
//! or as one msgpack vLLM `EventBatch` for a ZMQ publisher to send unchanged.

use std::os::raw::c_void;
use std::ptr;

use crate::error::{check, Error, Result};
use crate::pool::Pool;
use crate::sys;

/// One drained KV cache event. `Stored` and `Removed` name a page's stay in the prefix
/// index by its `block_id` = `(generation << 32) | page`: unique over the pool's life,
/// never 0, the same from a page's `Stored` to its `Removed`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KvEvent {
    /// A page entered the prefix index (in [`Sequence::commit`](crate::Sequence::commit)).
    Stored {
        /// The pool's page id.
        page: i32,
        block_id: u64,
        /// The parent page's `block_id`; 0 for the first page of a chain (its salt then
        /// stands for the parent).
        parent_block_id: u64,
        /// The page key, low and high 64 bits (the prefix index's own).
        key_lo: u64,
        key_hi: u64,
        /// The sequence's extra key ([`Pool::sequence_with`]).
        extra_key: u64,
        /// The page's `page_size` tokens (a copy).
        tokens: Vec<i32>,
        /// The sequence's salt (a copy); empty without salt.
        salt: Vec<u8>,
    },
    /// A published page left the index (evicted for reuse, in
    /// [`Sequence::append`](crate::Sequence::append)).
    Removed { page: i32, block_id: u64 },
    /// The queue overflowed: the pool emptied its prefix index and dropped the queued
    /// events; forget everything before this one.
    AllCleared,
}

impl Pool {
    /// Takes every queued event, oldest first; the queue is then empty. A pool made with
    /// `events_capacity` 0 gives `ErrorKind::InvalidState` (and the library's message).
    pub fn drain_events(&self) -> Result<Vec<KvEvent>> {
        let pool = self.as_raw();
        loop {
            let (mut n, mut nt) = (0i64, 0i64);
            check(unsafe {
                sys::bspa_pool_events_drain(pool, ptr::null_mut(), 0, ptr::null_mut(), 0, &mut n, &mut nt)
            })?;
            // One spare slot each: never a capacity of 0, which would only ask for the counts.
            let mut events = vec![unsafe { std::mem::zeroed::<sys::bspa_kv_event>() }; n as usize + 1];
            let mut tokens = vec![0i32; nt as usize + 1];
            let status = unsafe {
                sys::bspa_pool_events_drain(
                    pool,
                    events.as_mut_ptr(),
                    events.len() as i64,
                    tokens.as_mut_ptr(),
                    tokens.len() as i64,
                    &mut n,
                    &mut nt,
                )
            };
            // Events recorded by another thread since the size query: nothing was drained, ask again.
            if status == sys::BSPA_ERR_BUFFER_TOO_SMALL as sys::bspa_status {
                continue;
            }
            check(status)?;
            return events[..n as usize].iter().map(|e| self.event_from_raw(e, &tokens[..nt as usize])).collect();
        }
    }

    fn event_from_raw(&self, e: &sys::bspa_kv_event, tokens: &[i32]) -> Result<KvEvent> {
        match e.type_ as u32 {
            sys::BSPA_KV_EVENT_STORED => {
                let page_size = self.options().page_size as usize;
                let start = usize::try_from(e.token_offset)
                    .ok()
                    .filter(|&s| s + page_size <= tokens.len())
                    .ok_or_else(|| {
                        Error::new(
                            sys::BSPA_ERR_INTERNAL,
                            format!(
                                "stored event of page {}: token_offset {} past the {} drained tokens",
                                e.page,
                                e.token_offset,
                                tokens.len()
                            ),
                        )
                    })?;
                let salt = if e.salt.is_null() || e.salt_len == 0 {
                    Vec::new()
                } else {
                    // The pool owns the salt until it is destroyed; `self` is alive here.
                    unsafe { std::slice::from_raw_parts(e.salt as *const u8, e.salt_len) }.to_vec()
                };
                Ok(KvEvent::Stored {
                    page: e.page,
                    block_id: e.block_id,
                    parent_block_id: e.parent_block_id,
                    key_lo: e.key_lo,
                    key_hi: e.key_hi,
                    extra_key: e.extra_key,
                    tokens: tokens[start..start + page_size].to_vec(),
                    salt,
                })
            }
            sys::BSPA_KV_EVENT_REMOVED => Ok(KvEvent::Removed { page: e.page, block_id: e.block_id }),
            sys::BSPA_KV_EVENT_ALL_CLEARED => Ok(KvEvent::AllCleared),
            other => Err(Error::new(sys::BSPA_ERR_INTERNAL, format!("drained an event of unknown type {}", other))),
        }
    }

    /// Takes every queued event as one msgpack-encoded vLLM `EventBatch`,
    /// `[ts, [event...], dp_rank]` (`dp_rank` `None` or negative is nil), the bytes vLLM's
    /// encoder writes for the same events (bspa.h documents the mapping, and the
    /// `cache_salt` key NVIDIA Dynamo reads). It is the payload frame a ZMQ PUB publisher
    /// sends after the topic and an 8-byte big-endian sequence number. An empty queue gives
    /// a batch with no events. `ts` not finite is `ErrorKind::InvalidArgument`, a pool
    /// made with `events_capacity` 0 `ErrorKind::InvalidState`; nothing is drained then.
    pub fn drain_events_msgpack(&self, ts: f64, dp_rank: Option<i32>) -> Result<Vec<u8>> {
        let rank = dp_rank.unwrap_or(-1);
        let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
        loop {
            let mut size = 0usize;
            let status = unsafe {
                sys::bspa_pool_events_drain_msgpack(
                    self.as_raw(),
                    ts,
                    rank,
                    buf.as_mut_ptr() as *mut c_void,
                    buf.capacity(),
                    &mut size,
                )
            };
            if status == sys::BSPA_ERR_BUFFER_TOO_SMALL as sys::bspa_status {
                // `size` is what the batch needed then; events may have been recorded since.
                buf.reserve_exact(size + size / 2);
                continue;
            }
            check(status)?;
            assert!(
                size <= buf.capacity(),
                "bspa reported a batch of {} bytes in a buffer of {}",
                size,
                buf.capacity()
            );
            // SAFETY: the call wrote the batch's `size` bytes, within the capacity it was given.
            unsafe { buf.set_len(size) };
            return Ok(buf);
        }
    }
}
