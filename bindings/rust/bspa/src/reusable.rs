//! Reusable batches: one batch sized once from limits and re-planned every engine step
//! (`bspa_batch_create_reusable` / `bspa_batch_plan`, docs/design.md §4).

use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::{self, NonNull};

use crate::error::{check, Error, Result};
use crate::pool::{Batch, Pool, Sequence};
use crate::sys;

/// Limits of [`Pool::reusable_batch`] (`struct bspa_batch_options`). `max_seqs`,
/// `max_tokens` and `max_seq_tokens` are required (the zero `Default` is refused, naming the
/// limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchOptions {
    /// Sequences a plan may hold, >= 1; on a CUDA pool at most 65535, and with
    /// `fixed_launch_shape` `max_tokens / 128 + 2 * max_seqs <= 32767` (the header's ranges).
    pub max_seqs: i32,
    /// New tokens of a step (the sum of the query lengths), 1..=i32::MAX.
    pub max_tokens: i64,
    /// Tokens (computed + new) one sequence may have at planning, 1..=i32::MAX; sizes the
    /// device block table.
    pub max_seq_tokens: i64,
    /// New tokens of one sequence, 0..=max_tokens; 0 means `max_tokens`.
    pub max_query_len: i32,
    /// Size every launch from the limits alone, so a CUDA graph captured once replays after
    /// any later plan: q, out, k and v then have exactly `max_tokens` rows ([`Batch::rows`]),
    /// of which the step's new tokens are the first [`Batch::num_tokens`]; the rows past them
    /// are neither read nor written.
    pub fixed_launch_shape: bool,
    /// The longest query among the sequences the caller treats as decode rows (1 for plain
    /// decode; 0: no bound, i.e. 8). On CUDA only sequences of up to that many new tokens (at
    /// most 8) take the decode kernel, whose tile a fixed-shape batch otherwise sizes for
    /// `min(max_query_len, 8)`. A hint: every value is correct (the CPU ignores it);
    /// negative is `InvalidArgument`.
    pub max_decode_query_len: i32,
}

/// A batch re-planned every step: [`ReusableBatch::plan`] replaces its plan, and it derefs to
/// a [`Batch`] for the launches (`pool.kv_write_host(&batch, ...)`). It borrows its pool, so
/// the pool outlives it; unlike a one-step batch it does not borrow the sequences of its
/// plan: the plan holds a reference to each (a sequence dropped meanwhile keeps its pages out
/// of reuse until the next plan or the batch's drop). Launches before the first plan fail
/// with `InvalidState`. Used by one thread at a time (`Send`, not `Sync`); `plan` takes
/// `&mut self`, so no launch borrows the batch while it is re-planned.
///
/// ```compile_fail
/// # fn main() -> bspa::Result<()> {
/// let pool = bspa::Pool::new(&bspa::PoolOptions { num_pages: 4, ..Default::default() })?;
/// let batch = pool.reusable_batch(&bspa::BatchOptions { max_seqs: 1, max_tokens: 8, max_seq_tokens: 64,
///                                                       ..Default::default() })?;
/// drop(pool); // E0505: the batch borrows the pool
/// drop(batch);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ReusableBatch<'p> {
    batch: Batch<'p>,
    options: BatchOptions,
    planned: bool,
}

impl Pool {
    /// A batch of this pool sized once from `options`, with no plan yet (see
    /// [`ReusableBatch`]). A CUDA pool allocates its device metadata, two pinned staging
    /// buffers and the split workspace here and frees them when the batch drops, so plans and
    /// launches allocate nothing ([`device_allocation_counts`]). Errors: `InvalidArgument` (a
    /// limit out of its range, named with its value), `InvalidState` (a pool without KV
    /// storage), `OutOfMemory`, `Cuda`.
    pub fn reusable_batch(&self, options: &BatchOptions) -> Result<ReusableBatch<'_>> {
        let mut raw = unsafe { std::mem::zeroed::<sys::bspa_batch_options>() };
        check(unsafe { sys::bspa_batch_options_init(&mut raw) })?;
        raw.max_seqs = options.max_seqs;
        raw.max_tokens = options.max_tokens;
        raw.max_seq_tokens = options.max_seq_tokens;
        raw.max_query_len = options.max_query_len;
        raw.fixed_launch_shape = i32::from(options.fixed_launch_shape);
        raw.max_decode_query_len = options.max_decode_query_len;
        let mut batch = ptr::null_mut();
        check(unsafe { sys::bspa_batch_create_reusable(&mut batch, self.as_raw(), &raw) })?;
        let mut options = *options;
        if options.max_query_len == 0 {
            options.max_query_len = options.max_tokens as i32; // the library's default, checked <= i32::MAX
        }
        Ok(ReusableBatch {
            batch: Batch {
                raw: NonNull::new(batch).expect("bspa returned BSPA_OK and a NULL batch"),
                pool: self,
                num_tokens: 0,
                rows: 0,
                _seqs: PhantomData,
                _not_sync: PhantomData,
            },
            options,
            planned: false,
        })
    }
}

impl<'p> ReusableBatch<'p> {
    /// Plans one step of a CPU pool (`bspa_batch_plan`): sequence `i` computes
    /// `query_lens[i]` new tokens after its computed ones, as [`Pool::batch`]. A step past a
    /// limit is `OutOfRange` naming it; a failed plan keeps the previous one (and
    /// [`Batch::num_tokens`]) as it was.
    pub fn plan(&mut self, seqs: &[&Sequence<'p>], query_lens: &[i32]) -> Result<()> {
        // A null stream: CPU pools ignore it; CUDA pools take theirs explicitly.
        unsafe { self.plan_on_stream(seqs, query_lens, ptr::null_mut()) }
    }

    /// [`ReusableBatch::plan`] copying the plan to the device on `stream`: launches queued on
    /// `stream` before the call still see the previous plan, launches after it this one.
    ///
    /// # Safety
    /// `stream` must be a valid CUDA stream of the pool's device (or null), not capturing a
    /// graph, and launches of the previous plan on other streams must be ordered before this
    /// call's copy by the caller.
    pub unsafe fn plan_on_stream(
        &mut self,
        seqs: &[&Sequence<'p>],
        query_lens: &[i32],
        stream: sys::bspa_stream,
    ) -> Result<()> {
        if seqs.len() != query_lens.len() {
            return Err(Error::new(
                sys::BSPA_ERR_INVALID_ARGUMENT,
                format!("{} sequences but {} query lengths", seqs.len(), query_lens.len()),
            ));
        }
        let pool = self.batch.pool;
        if let Some(other) = seqs.iter().find(|s| !ptr::eq(s.pool(), pool)) {
            return Err(Error::new(
                sys::BSPA_ERR_INVALID_ARGUMENT,
                format!("sequence {:p} belongs to another pool", other.as_raw()),
            ));
        }
        let raw_seqs: Vec<*mut sys::bspa_seq> = seqs.iter().map(|s| s.as_raw()).collect();
        let n = i32::try_from(seqs.len())
            .map_err(|_| Error::new(sys::BSPA_ERR_INVALID_ARGUMENT, format!("{} sequences in one plan", seqs.len())))?;
        check(sys::bspa_batch_plan(self.batch.raw.as_ptr(), raw_seqs.as_ptr(), query_lens.as_ptr(), n, stream))?;
        let num_tokens = query_lens.iter().map(|&q| q.max(0) as usize).sum();
        self.batch.num_tokens = num_tokens;
        self.batch.rows = if self.options.fixed_launch_shape { self.options.max_tokens as usize } else { num_tokens };
        self.planned = true;
        Ok(())
    }

    /// The limits it was made with (`max_query_len` 0 given reads back as `max_tokens`).
    pub fn options(&self) -> &BatchOptions {
        &self.options
    }

    /// Whether a plan succeeded yet (launches before one are `InvalidState`).
    pub fn is_planned(&self) -> bool {
        self.planned
    }
}

impl<'p> Deref for ReusableBatch<'p> {
    type Target = Batch<'p>;

    fn deref(&self) -> &Batch<'p> {
        &self.batch
    }
}

/// Process-wide counts of the device and pinned-host allocations bspa has made and freed
/// (`bspa_device_allocation_counts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceAllocationCounts {
    pub allocations: u64,
    pub frees: u64,
}

/// The device and pinned-host allocations bspa has made and freed in this process: equal
/// before and after a steady-state step that allocates nothing.
pub fn device_allocation_counts() -> Result<DeviceAllocationCounts> {
    let mut c = DeviceAllocationCounts::default();
    check(unsafe { sys::bspa_device_allocation_counts(&mut c.allocations, &mut c.frees) })?;
    Ok(c)
}
