//! Safe Rust interface to libbspa: a paged KV cache with prefix caching and block-sparse
//! prefill attention.
//!
//! Handles are RAII ([`Pool`], [`Sequence`], [`Layout`], [`Batch`]); every call returns
//! [`Result`] with an [`Error`] carrying the [`ErrorKind`] and the library's message.
//! Thread safety follows the header: pools and sequences are internally synchronised
//! (`Send + Sync`), layouts immutable (`Send + Sync`), a batch is used by one thread at
//! a time (`Send`). Launches on host slices of a CPU pool are safe; launches on raw
//! DLTensors (device memory) are `unsafe`.
//!
//! Bring-your-own cache: [`prefill_paged`] (raw DLTensors, `unsafe`) and
//! [`prefill_paged_host`] (host slices, safe) run the same attention over caller-owned
//! pages, a block table and per-sequence lengths; [`prefill_workspace_bytes`] sizes their
//! optional workspace.
//!
//! Steady state: [`Pool::reusable_batch`] sizes one [`ReusableBatch`] from
//! [`BatchOptions`] limits and [`ReusableBatch::plan`] re-plans it every step (nothing is
//! allocated per step; [`device_allocation_counts`] shows it); it derefs to a [`Batch`] for
//! the launches.
//!
//! KV cache events for a prefix-aware router: a pool made with
//! [`PoolOptions::events_capacity`] > 0 records pages entering and leaving its prefix
//! index; [`Pool::drain_events`] returns them as [`KvEvent`]s and
//! [`Pool::drain_events_msgpack`] as one vLLM `EventBatch` for a ZMQ publisher.
//!
//! KV transfer between pools (disaggregated serving, NIXL): [`Pool::memory`] describes the
//! storage for a transport, [`Pool::export_kv`] pins a prompt's cached pages and
//! [`Pool::import_kv`] reserves pages for the ones a pool lacks ([`KvImport::commit`]
//! publishes them; dropping the import aborts).
//!
//! ```no_run
//! # fn main() -> bspa::Result<()> {
//! use bspa::{DType, Layout, Pool, PoolOptions};
//! let pool = Pool::new(&PoolOptions { dtype: DType::F32, num_kv_heads: 2, head_dim: 64,
//!                                     page_size: 16, num_pages: 64, ..Default::default() })?;
//! let prompt: Vec<i32> = (0..100).collect();
//! let seq = pool.sequence()?;
//! let cached = seq.match_prefix(&prompt)?;
//! seq.append(&prompt[cached..])?;
//! let new = prompt.len() - cached;
//! let (k, v, q) = (vec![0f32; new * 2 * 64], vec![0f32; new * 2 * 64], vec![0f32; new * 4 * 64]);
//! let mut out = vec![0f32; q.len()];
//! {
//!     let batch = pool.batch(&[&seq], &[new as i32])?;
//!     pool.kv_write_host(&batch, 0, &k, &v)?;
//!     pool.prefill_host(&batch, 0, &Layout::dense(4)?, &q, &mut out, 0.125, None)?;
//! }
//! seq.commit(prompt.len())?;
//! # Ok(()) }
//! ```

pub use bspa_sys as sys;

mod error;
mod events;
mod layout;
mod paged;
mod pool;
mod reusable;
mod tensor;
mod transfer;

pub use error::{Error, ErrorKind, Result};
pub use events::KvEvent;
pub use half::{bf16, f16};
pub use layout::{Layout, StridedOptions};
pub use paged::{prefill_paged, prefill_paged_host, prefill_workspace_bytes, HostPagedArgs, PagedArgs};
pub use pool::{Batch, Device, Pool, PoolInfo, PoolOptions, PoolStats, SeqInfo, Sequence, DEFAULT_MEMORY_BYTES};
pub use reusable::{device_allocation_counts, BatchOptions, DeviceAllocationCounts, ReusableBatch};
pub use tensor::{DType, Element};
pub use transfer::{ImportInfo, ImportOptions, Kv, KvExport, KvImport, PoolMemory};

use std::ffi::CStr;

/// The ABI version this crate was built for (`BSPA_ABI_VERSION` of its header).
pub const ABI_VERSION: u32 = sys::BSPA_ABI_VERSION;

/// Fails with `ErrorKind::Version` when the loaded libbspa has another ABI version.
/// Every constructor checks it; call it early to fail at start-up instead.
pub fn check_abi() -> Result<()> {
    error::check_abi()
}

/// The loaded library's version, e.g. "0.1.0".
pub fn version() -> &'static str {
    unsafe { CStr::from_ptr(sys::bspa_version_string()) }.to_str().unwrap_or("?")
}

/// What the loaded library was compiled with (backends, CUDA arches, dtypes).
pub fn build_info() -> &'static str {
    unsafe { CStr::from_ptr(sys::bspa_build_info()) }.to_str().unwrap_or("?")
}

/// CUDA devices visible to the library (0 without a GPU, a driver, or CUDA support).
pub fn cuda_device_count() -> Result<i32> {
    let mut count = 0;
    error::check(unsafe { sys::bspa_device_count(sys::kDLCUDA as i32, &mut count) })?;
    Ok(count)
}
