use std::marker::PhantomData;
use std::os::raw::c_void;
use std::ptr::{self, NonNull};
use std::sync::{PoisonError, RwLock};

use crate::error::{check, check_abi, Error, Result};
use crate::layout::Layout;
use crate::sys;
use crate::tensor::{host_tensor, DType, Element};

/// Where a pool's storage (or a launch of [`prefill_paged`](crate::prefill_paged)) lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Cuda(i32),
}

impl Device {
    /// The DLPack device type and id.
    pub(crate) fn raw(self) -> (i32, i32) {
        match self {
            Device::Cpu => (sys::kDLCPU as i32, 0),
            Device::Cuda(id) => (sys::kDLCUDA as i32, id),
        }
    }
}

/// KV storage budget of [`PoolOptions::default`]: 256 MiB (used when `num_pages` is 0).
pub const DEFAULT_MEMORY_BYTES: u64 = 256 << 20;

/// Options of [`Pool::new`]. `Default` is a CPU pool ready to use: f32, one layer, one kv
/// head, head_dim 128, 64-token pages, [`DEFAULT_MEMORY_BYTES`] of storage;
/// [`PoolOptions::cuda`] starts a GPU pool in bf16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolOptions {
    pub device: Device,
    pub dtype: DType,
    pub num_layers: i32,
    pub num_kv_heads: i32,
    pub head_dim: i32,
    pub page_size: i32,
    pub num_pages: i64,
    pub memory_bytes: u64,
    pub hash_seed: u64,
    /// KV cache event records kept until drained ([`Pool::drain_events`]), in
    /// `[0, i32::MAX]`; 0 (the default) = no events and no event work. Reserved at
    /// creation: about (64 + 4 * page_size) bytes per record.
    pub events_capacity: i64,
}

impl Default for PoolOptions {
    fn default() -> Self {
        let mut raw = unsafe { std::mem::zeroed::<sys::bspa_pool_options>() };
        unsafe { sys::bspa_pool_options_init(&mut raw) };
        PoolOptions {
            device: if raw.device_type == sys::kDLCUDA as i32 { Device::Cuda(raw.device_id) } else { Device::Cpu },
            // f32 on the CPU, where the backend computes in f32 anyway (the C default is bf16).
            dtype: DType::F32,
            num_layers: raw.num_layers,
            num_kv_heads: raw.num_kv_heads,
            head_dim: raw.head_dim,
            page_size: raw.page_size,
            num_pages: raw.num_pages,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            hash_seed: raw.hash_seed,
            events_capacity: raw.events_capacity,
        }
    }
}

impl PoolOptions {
    /// The defaults for GPU `device_id`, in bf16 (the GPU kernels take 16-bit K/V).
    pub fn cuda(device_id: i32) -> PoolOptions {
        PoolOptions { device: Device::Cuda(device_id), dtype: DType::BF16, ..Default::default() }
    }
}

/// What a pool was made with (see `struct bspa_pool_info`); `page_bytes` counts one page
/// over all layers, K and V.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolInfo {
    pub dtype: DType,
    pub num_layers: i32,
    pub num_kv_heads: i32,
    pub head_dim: i32,
    pub page_size: i32,
    pub num_pages: i64,
    pub page_bytes: u64,
    pub storage_bytes: u64,
    pub kv_scales_layers: i32,
}

/// A snapshot of a pool's counters (see `struct bspa_pool_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    pub pages_total: i64,
    pub pages_free: i64,
    pub pages_cached: i64,
    pub pages_in_use: i64,
    pub num_sequences: i64,
    pub match_calls: u64,
    pub hits: u64,
    pub misses: u64,
    pub matched_tokens: u64,
    pub queried_tokens: u64,
    pub hashed_tokens: u64,
    pub published_pages: u64,
    pub evictions: u64,
}

/// A paged KV pool with its prefix cache. Internally synchronised: `Send + Sync`, and
/// every method takes `&self`.
#[derive(Debug)]
pub struct Pool {
    raw: NonNull<sys::bspa_pool>,
    options: PoolOptions,
    /// Orders this pool's launches: `kv_write` (writes pages) alone, `prefill` (reads them)
    /// beside other prefills. The header leaves that to the caller ("on the CPU, overlapping
    /// ones race"), and safe code reaches the same pages from two threads through two batches
    /// over one sequence, or over pages a commit shared.
    launches: RwLock<()>,
}

// The header: a pool and its sequences are internally synchronised (any thread, any time).
unsafe impl Send for Pool {}
unsafe impl Sync for Pool {}

impl Pool {
    pub fn new(options: &PoolOptions) -> Result<Pool> {
        check_abi()?;
        let mut raw = unsafe { std::mem::zeroed::<sys::bspa_pool_options>() };
        check(unsafe { sys::bspa_pool_options_init(&mut raw) })?;
        let (device_type, device_id) = options.device.raw();
        raw.device_type = device_type;
        raw.device_id = device_id;
        raw.dtype = options.dtype.raw();
        raw.num_layers = options.num_layers;
        raw.num_kv_heads = options.num_kv_heads;
        raw.head_dim = options.head_dim;
        raw.page_size = options.page_size;
        raw.num_pages = options.num_pages;
        raw.memory_bytes = options.memory_bytes;
        raw.hash_seed = options.hash_seed;
        raw.events_capacity = options.events_capacity;
        let mut pool = ptr::null_mut();
        check(unsafe { sys::bspa_pool_create(&mut pool, &raw) })?;
        Ok(Pool {
            raw: NonNull::new(pool).expect("bspa returned BSPA_OK and a NULL pool"),
            options: *options,
            launches: RwLock::new(()),
        })
    }

    pub fn options(&self) -> &PoolOptions {
        &self.options
    }

    pub fn stats(&self) -> Result<PoolStats> {
        let mut s = unsafe { std::mem::zeroed::<sys::bspa_pool_stats>() };
        check(unsafe { sys::bspa_pool_stats(self.raw.as_ptr(), &mut s) })?;
        Ok(PoolStats {
            pages_total: s.pages_total,
            pages_free: s.pages_free,
            pages_cached: s.pages_cached,
            pages_in_use: s.pages_in_use,
            num_sequences: s.num_sequences,
            match_calls: s.match_calls,
            hits: s.hits,
            misses: s.misses,
            matched_tokens: s.matched_tokens,
            queried_tokens: s.queried_tokens,
            hashed_tokens: s.hashed_tokens,
            published_pages: s.published_pages,
            evictions: s.evictions,
        })
    }

    /// The pool's geometry, dtype and storage bytes (`bspa_pool_info`).
    pub fn info(&self) -> Result<PoolInfo> {
        let mut i = unsafe { std::mem::zeroed::<sys::bspa_pool_info>() };
        i.version = sys::BSPA_POOL_INFO_VERSION;
        check(unsafe { sys::bspa_pool_info(self.raw.as_ptr(), &mut i) })?;
        Ok(PoolInfo {
            dtype: DType::from_raw(i.dtype)
                .ok_or_else(|| Error::new(sys::BSPA_ERR_INTERNAL, format!("unknown pool dtype {}", i.dtype)))?,
            num_layers: i.num_layers,
            num_kv_heads: i.num_kv_heads,
            head_dim: i.head_dim,
            page_size: i.page_size,
            num_pages: i.num_pages,
            page_bytes: i.page_bytes,
            storage_bytes: i.storage_bytes,
            kv_scales_layers: i.kv_scales_layers,
        })
    }

    /// Sets one layer's fp32 dequantization scales of an [`DType::Fp8E4m3`] pool, one per
    /// KV head for K and for V (value = scale × e4m3; e.g. amax / 448 from calibration).
    /// Errors: `InvalidArgument` (a count other than `num_kv_heads`, a scale not finite
    /// and positive; the message names layer, head and value), `OutOfRange` (layer), `InvalidState`
    /// (a pool of another dtype). A failed call leaves the layer's scales as they were.
    pub fn set_kv_scales(&self, layer: i32, k_scales: &[f32], v_scales: &[f32]) -> Result<()> {
        if k_scales.len() != v_scales.len() {
            return Err(Error::new(
                sys::BSPA_ERR_INVALID_ARGUMENT,
                format!("{} K scales but {} V scales", k_scales.len(), v_scales.len()),
            ));
        }
        let n = i32::try_from(k_scales.len())
            .map_err(|_| Error::new(sys::BSPA_ERR_INVALID_ARGUMENT, format!("{} scales", k_scales.len())))?;
        check(unsafe {
            sys::bspa_pool_set_kv_scales(self.raw.as_ptr(), layer, k_scales.as_ptr(), v_scales.as_ptr(), n)
        })
    }

    /// One layer's K and V scales of an fp8 pool; `InvalidState` when never set.
    pub fn kv_scales(&self, layer: i32) -> Result<(Vec<f32>, Vec<f32>)> {
        let n = self.options.num_kv_heads.max(0);
        let mut k = vec![0f32; n as usize];
        let mut v = vec![0f32; n as usize];
        check(unsafe { sys::bspa_pool_get_kv_scales(self.raw.as_ptr(), layer, k.as_mut_ptr(), v.as_mut_ptr(), n) })?;
        Ok((k, v))
    }

    /// Verifies every invariant of the pool (for tests); `ErrorKind::Internal` if one is broken.
    pub fn check(&self) -> Result<()> {
        check(unsafe { sys::bspa_pool_check(self.raw.as_ptr()) })
    }

    /// A new empty sequence without salt.
    pub fn sequence(&self) -> Result<Sequence<'_>> {
        self.sequence_with(&[], 0)
    }

    /// A new empty sequence. `salt` isolates tenants and must come from the server (a
    /// tenant id), never from a request body: shared prefixes are observable through timing.
    pub fn sequence_with(&self, salt: &[u8], extra_key: u64) -> Result<Sequence<'_>> {
        let mut options = unsafe { std::mem::zeroed::<sys::bspa_seq_options>() };
        check(unsafe { sys::bspa_seq_options_init(&mut options) })?;
        if !salt.is_empty() {
            options.salt = salt.as_ptr() as *const c_void;
            options.salt_len = salt.len();
        }
        options.extra_key = extra_key;
        let mut seq = ptr::null_mut();
        check(unsafe { sys::bspa_seq_create(&mut seq, self.raw.as_ptr(), &options) })?;
        Ok(Sequence { raw: NonNull::new(seq).expect("bspa returned BSPA_OK and a NULL sequence"), pool: self })
    }

    /// Plans one step of a CPU pool: sequence `i` computes `query_lens[i]` new tokens
    /// after its computed ones. The batch borrows the sequences, so they outlive it.
    pub fn batch<'a>(&'a self, seqs: &[&'a Sequence<'a>], query_lens: &[i32]) -> Result<Batch<'a>> {
        // A null stream is the default stream, ignored by CPU pools; CUDA pools take the
        // stream explicitly (batch_on_stream) since ordering is the caller's business.
        unsafe { self.batch_on_stream(seqs, query_lens, ptr::null_mut()) }
    }

    /// [`Pool::batch`] uploading its metadata on `stream`.
    ///
    /// # Safety
    /// `stream` must be a valid CUDA stream of the pool's device (or null).
    pub unsafe fn batch_on_stream<'a>(
        &'a self,
        seqs: &[&'a Sequence<'a>],
        query_lens: &[i32],
        stream: sys::bspa_stream,
    ) -> Result<Batch<'a>> {
        if seqs.len() != query_lens.len() {
            return Err(Error::new(
                sys::BSPA_ERR_INVALID_ARGUMENT,
                format!("{} sequences but {} query lengths", seqs.len(), query_lens.len()),
            ));
        }
        if let Some(other) = seqs.iter().find(|s| !ptr::eq(s.pool, self)) {
            return Err(Error::new(
                sys::BSPA_ERR_INVALID_ARGUMENT,
                format!("sequence {:p} belongs to another pool", other.raw.as_ptr()),
            ));
        }
        let raw_seqs: Vec<*mut sys::bspa_seq> = seqs.iter().map(|s| s.raw.as_ptr()).collect();
        let n = i32::try_from(seqs.len()).map_err(|_| {
            Error::new(sys::BSPA_ERR_INVALID_ARGUMENT, format!("{} sequences in one batch", seqs.len()))
        })?;
        let mut batch = ptr::null_mut();
        check(sys::bspa_batch_create(
            &mut batch,
            self.raw.as_ptr(),
            raw_seqs.as_ptr(),
            query_lens.as_ptr(),
            n,
            stream,
        ))?;
        let num_tokens = query_lens.iter().map(|&q| q.max(0) as usize).sum();
        Ok(Batch {
            raw: NonNull::new(batch).expect("bspa returned BSPA_OK and a NULL batch"),
            pool: self,
            num_tokens,
            rows: num_tokens,
            _seqs: PhantomData,
            _not_sync: PhantomData,
        })
    }

    fn host_launch_checks<T: Element>(&self, what: &str) -> Result<()> {
        if self.options.device != Device::Cpu {
            return Err(Error::new(
                sys::BSPA_ERR_DEVICE_MISMATCH,
                format!(
                    "{}: host slices need a CPU pool; use the unsafe DLTensor launch for {:?}",
                    what, self.options.device
                ),
            ));
        }
        // An fp8 pool takes 16-bit writes, queries and outputs (only its pages are e4m3).
        let fp8_ok = self.options.dtype == DType::Fp8E4m3 && matches!(T::DTYPE, DType::BF16 | DType::F16);
        if T::DTYPE != self.options.dtype && !fp8_ok {
            return Err(Error::new(
                sys::BSPA_ERR_DTYPE_MISMATCH,
                format!("{}: {:?} elements for a pool of {:?}", what, T::DTYPE, self.options.dtype),
            ));
        }
        Ok(())
    }

    fn check_len(what: &str, len: usize, rows: usize, heads: usize, dim: usize) -> Result<()> {
        if len != rows * heads * dim {
            return Err(Error::new(
                sys::BSPA_ERR_SHAPE_MISMATCH,
                format!(
                    "{} has {} elements, expected [{}, {}, {}] = {}",
                    what,
                    len,
                    rows,
                    heads,
                    dim,
                    rows * heads * dim
                ),
            ));
        }
        Ok(())
    }

    /// Writes the batch's new K and V (`[T_new, num_kv_heads, head_dim]`, row-major; `T_new` =
    /// [`Batch::rows`]) of a CPU pool into their pages of `layer`.
    pub fn kv_write_host<T: Element>(&self, batch: &Batch<'_>, layer: i32, k: &[T], v: &[T]) -> Result<()> {
        self.host_launch_checks::<T>("kv_write_host")?;
        let (rows, heads, dim) = (batch.rows, self.options.num_kv_heads as usize, self.options.head_dim as usize);
        Pool::check_len("k", k.len(), rows, heads, dim)?;
        Pool::check_len("v", v.len(), rows, heads, dim)?;
        let mut shape_k = [rows as i64, heads as i64, dim as i64];
        let mut shape_v = shape_k;
        let tk = host_tensor(k.as_ptr() as *mut c_void, T::dl_dtype(), &mut shape_k);
        let tv = host_tensor(v.as_ptr() as *mut c_void, T::dl_dtype(), &mut shape_v);
        // The library reads k and v only (const DLTensor *); the slices outlive the call.
        unsafe { self.kv_write(batch, layer, &tk, &tv, ptr::null_mut()) }
    }

    /// Block-sparse causal attention of the batch's new tokens on a CPU pool: `q` and
    /// `out` `[T_new, Hq, head_dim]` with `Hq = layout.num_heads()`; `lse`, optional,
    /// `[Hq, T_new]`.
    #[allow(clippy::too_many_arguments)] // the arguments of bspa_prefill, one by one
    pub fn prefill_host<T: Element>(
        &self,
        batch: &Batch<'_>,
        layer: i32,
        layout: &Layout,
        q: &[T],
        out: &mut [T],
        scale: f32,
        lse: Option<&mut [f32]>,
    ) -> Result<()> {
        self.host_launch_checks::<T>("prefill_host")?;
        let (rows, heads, dim) = (batch.rows, layout.num_heads().max(0) as usize, self.options.head_dim as usize);
        Pool::check_len("q", q.len(), rows, heads, dim)?;
        Pool::check_len("out", out.len(), rows, heads, dim)?;
        let mut shape_q = [rows as i64, heads as i64, dim as i64];
        let mut shape_out = shape_q;
        let mut shape_lse = [heads as i64, rows as i64];
        let tq = host_tensor(q.as_ptr() as *mut c_void, T::dl_dtype(), &mut shape_q);
        let mut tout = host_tensor(out.as_mut_ptr() as *mut c_void, T::dl_dtype(), &mut shape_out);
        let mut tlse = match lse {
            Some(lse) => {
                Pool::check_len("lse", lse.len(), heads, rows, 1)?;
                Some(host_tensor(lse.as_mut_ptr() as *mut c_void, f32::dl_dtype(), &mut shape_lse))
            }
            None => None,
        };
        unsafe { self.prefill(batch, layer, layout, &tq, &mut tout, scale, tlse.as_mut(), ptr::null_mut()) }
    }

    /// `bspa_kv_write` on raw tensors.
    ///
    /// # Safety
    /// The tensors' data must be valid for their shape, dtype and device, stay alive until
    /// the launch completes on `stream`, and `stream` must be a stream of the pool's device
    /// (or null). The batch must not be dropped or re-planned ([`ReusableBatch::plan`]) before
    /// the launch completes either (either releases its pages, which later calls may reuse),
    /// nor, on a device, the layer's scales set ([`Pool::set_kv_scales`]). The pool orders
    /// its CPU launches (a write excludes every other launch of the pool while it runs); on a
    /// device, where a launch only queues, launches that write pages another launch reads
    /// (two batches over one sequence, or pages a commit shared) must be ordered by their
    /// streams.
    ///
    /// [`ReusableBatch::plan`]: crate::ReusableBatch::plan
    pub unsafe fn kv_write(
        &self,
        batch: &Batch<'_>,
        layer: i32,
        k: &sys::DLTensor,
        v: &sys::DLTensor,
        stream: sys::bspa_stream,
    ) -> Result<()> {
        let mut args = std::mem::zeroed::<sys::bspa_kv_write_args>();
        check(sys::bspa_kv_write_args_init(&mut args))?;
        args.layer = layer;
        args.k_new = k;
        args.v_new = v;
        let _writing = self.launches.write().unwrap_or_else(PoisonError::into_inner);
        check(sys::bspa_kv_write(self.raw.as_ptr(), batch.raw.as_ptr(), &args, stream))
    }

    /// `bspa_prefill` on raw tensors.
    ///
    /// # Safety
    /// As [`Pool::kv_write`]; `out` and `lse` are written by the launch, and `layout` must
    /// outlive it too (a CSR layout's device copy is freed with it).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn prefill(
        &self,
        batch: &Batch<'_>,
        layer: i32,
        layout: &Layout,
        q: &sys::DLTensor,
        out: &mut sys::DLTensor,
        scale: f32,
        lse: Option<&mut sys::DLTensor>,
        stream: sys::bspa_stream,
    ) -> Result<()> {
        let mut args = std::mem::zeroed::<sys::bspa_prefill_args>();
        check(sys::bspa_prefill_args_init(&mut args))?;
        args.layer = layer;
        args.layout = layout.as_raw();
        args.q = q;
        args.out = out;
        args.lse = lse.map_or(ptr::null_mut(), |t| t as *mut sys::DLTensor);
        args.scale = scale;
        let _reading = self.launches.read().unwrap_or_else(PoisonError::into_inner);
        check(sys::bspa_prefill(self.raw.as_ptr(), batch.raw.as_ptr(), &args, stream))
    }

    /// One layer's K and V storage of a CPU pool as slices of `T` (the pool's element type),
    /// `[num_pages, num_kv_heads, page_size, head_dim]` row-major.
    ///
    /// The slices borrow the pool mutably: the pool cannot be dropped while they live, and
    /// no sequence, batch or launch of it exists meanwhile (those all borrow the pool), so
    /// nothing writes the storage under the reader (docs/design.md, "Lifetimes in the
    /// bindings"). Drop the sequences first; their published pages stay cached.
    ///
    /// ```compile_fail
    /// # use bspa::{DType, Pool, PoolOptions};
    /// let mut pool = Pool::new(&PoolOptions { dtype: DType::F32, num_pages: 4, ..Default::default() }).unwrap();
    /// let (k, _v) = pool.kv_host::<f32>(0).unwrap();
    /// drop(pool); // E0505: cannot move out of `pool` because it is borrowed
    /// println!("{}", k[0]);
    /// ```
    pub fn kv_host<T: Element>(&mut self, layer: i32) -> Result<(&[T], &[T])> {
        self.host_launch_checks::<T>("kv_host")?;
        if T::DTYPE != self.options.dtype {
            // An fp8 pool's pages are bytes, not T (kv_host_fp8 reads them).
            return Err(Error::new(
                sys::BSPA_ERR_DTYPE_MISMATCH,
                format!("kv_host: {:?} elements for a pool of {:?} (use kv_host_fp8)", T::DTYPE, self.options.dtype),
            ));
        }
        // SAFETY: bspa_pool_kv fills two views of the pool's storage (valid until
        // bspa_pool_destroy, which `&mut self`'s borrow delays past the slices); `T` is the
        // pool's element type, checked above; `&mut self` excludes concurrent writers.
        unsafe {
            let (k, v) = self.kv(layer)?;
            let shape = std::slice::from_raw_parts(k.shape, k.ndim as usize);
            let numel = shape.iter().product::<i64>() as usize;
            Ok((
                std::slice::from_raw_parts(k.data as *const T, numel),
                std::slice::from_raw_parts(v.data as *const T, numel),
            ))
        }
    }

    /// One layer's K and V storage of a CPU fp8 pool as its e4m3 bytes (borrowing the pool
    /// mutably, as [`Pool::kv_host`]); the values are byte-decoded × [`Pool::kv_scales`].
    pub fn kv_host_fp8(&mut self, layer: i32) -> Result<(&[u8], &[u8])> {
        if self.options.device != Device::Cpu || self.options.dtype != DType::Fp8E4m3 {
            return Err(Error::new(
                sys::BSPA_ERR_DTYPE_MISMATCH,
                format!(
                    "kv_host_fp8: needs a CPU fp8 pool, this one is {:?} on {:?}",
                    self.options.dtype, self.options.device
                ),
            ));
        }
        // SAFETY: as kv_host; the elements are bytes.
        unsafe {
            let (k, v) = self.kv(layer)?;
            let shape = std::slice::from_raw_parts(k.shape, k.ndim as usize);
            let numel = shape.iter().product::<i64>() as usize;
            Ok((
                std::slice::from_raw_parts(k.data as *const u8, numel),
                std::slice::from_raw_parts(v.data as *const u8, numel),
            ))
        }
    }

    /// Views of one layer's K and V storage, `[num_pages, num_kv_heads, page_size, head_dim]`
    /// (device memory for a CUDA pool). [`Pool::kv_host`] is the safe form for CPU pools.
    ///
    /// # Safety
    /// The views alias the pool's storage and carry no lifetime: they are valid only while
    /// the pool lives, and reading them races with concurrent launches.
    pub unsafe fn kv(&self, layer: i32) -> Result<(sys::DLTensor, sys::DLTensor)> {
        let mut k = std::mem::zeroed::<sys::DLTensor>();
        let mut v = std::mem::zeroed::<sys::DLTensor>();
        check(sys::bspa_pool_kv(self.raw.as_ptr(), layer, &mut k, &mut v))?;
        Ok((k, v))
    }

    pub fn as_raw(&self) -> *mut sys::bspa_pool {
        self.raw.as_ptr()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        unsafe { sys::bspa_pool_destroy(self.raw.as_ptr()) }
    }
}

/// What a sequence holds (see `struct bspa_seq_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeqInfo {
    pub num_tokens: i64,
    pub num_computed: i64,
    pub num_cached: i64,
    pub num_pages: i64,
}

/// A request's tokens and pages, borrowed from its pool. Internally synchronised like
/// the pool: `Send + Sync`. Dropping it releases the pages (published ones stay cached).
#[derive(Debug)]
pub struct Sequence<'p> {
    raw: NonNull<sys::bspa_seq>,
    pool: &'p Pool,
}

unsafe impl Send for Sequence<'_> {}
unsafe impl Sync for Sequence<'_> {}

impl<'p> Sequence<'p> {
    /// Pins the longest cached page-aligned prefix of `tokens` (never the last token) and
    /// returns its length; 0 on a miss. Only on an empty sequence.
    pub fn match_prefix(&self, tokens: &[i32]) -> Result<usize> {
        let mut cached = 0i64;
        check(unsafe { sys::bspa_seq_match(self.raw.as_ptr(), tokens.as_ptr(), tokens.len() as i64, &mut cached) })?;
        Ok(cached as usize)
    }

    /// Appends tokens and reserves their pages; all or nothing (`OutOfPages` changes nothing).
    pub fn append(&self, tokens: &[i32]) -> Result<()> {
        check(unsafe { sys::bspa_seq_append(self.raw.as_ptr(), tokens.as_ptr(), tokens.len() as i64) })
    }

    /// Tokens `[0, computed)` now hold valid KV; full pages are published.
    pub fn commit(&self, computed: usize) -> Result<()> {
        check(unsafe { sys::bspa_seq_commit(self.raw.as_ptr(), computed as i64) })
    }

    pub fn pages(&self) -> Result<Vec<i32>> {
        loop {
            let mut count = 0i64;
            check(unsafe { sys::bspa_seq_pages(self.raw.as_ptr(), ptr::null_mut(), 0, &mut count) })?;
            let mut pages = vec![0i32; count as usize];
            let status =
                unsafe { sys::bspa_seq_pages(self.raw.as_ptr(), pages.as_mut_ptr(), pages.len() as i64, &mut count) };
            // Another thread may have appended in between: ask again.
            if status == sys::BSPA_ERR_BUFFER_TOO_SMALL as i32 {
                continue;
            }
            check(status)?;
            pages.truncate(count as usize);
            return Ok(pages);
        }
    }

    pub fn info(&self) -> Result<SeqInfo> {
        let mut i = unsafe { std::mem::zeroed::<sys::bspa_seq_info>() };
        check(unsafe { sys::bspa_seq_info(self.raw.as_ptr(), &mut i) })?;
        Ok(SeqInfo {
            num_tokens: i.num_tokens,
            num_computed: i.num_computed,
            num_cached: i.num_cached,
            num_pages: i.num_pages,
        })
    }

    pub fn pool(&self) -> &'p Pool {
        self.pool
    }

    pub fn as_raw(&self) -> *mut sys::bspa_seq {
        self.raw.as_ptr()
    }
}

impl Drop for Sequence<'_> {
    fn drop(&mut self) {
        unsafe { sys::bspa_seq_destroy(self.raw.as_ptr()) }
    }
}

/// One engine step's plan. It borrows its pool and sequences, so neither can be dropped
/// while it lives. Used by one thread (one stream) at a time: `Send`, not `Sync`.
///
/// ```compile_fail
/// fn needs_sync<T: Sync>() {}
/// needs_sync::<bspa::Batch<'static>>();
/// ```
///
/// ```compile_fail
/// # fn main() -> bspa::Result<()> {
/// let pool = bspa::Pool::new(&bspa::PoolOptions { num_pages: 4, ..Default::default() })?;
/// let seq = pool.sequence()?;
/// seq.append(&[1, 2, 3])?;
/// let batch = pool.batch(&[&seq], &[3])?;
/// drop(seq); // the batch still uses it
/// drop(batch);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Batch<'a> {
    pub(crate) raw: NonNull<sys::bspa_batch>,
    pub(crate) pool: &'a Pool,
    pub(crate) num_tokens: usize,
    /// Rows of the launch tensors: num_tokens, or a fixed-shape reusable batch's max_tokens.
    pub(crate) rows: usize,
    pub(crate) _seqs: PhantomData<&'a Sequence<'a>>,
    pub(crate) _not_sync: PhantomData<std::cell::Cell<()>>,
}

unsafe impl Send for Batch<'_> {}

impl<'a> Batch<'a> {
    /// The step's new tokens: the sum of the query lengths.
    pub fn num_tokens(&self) -> usize {
        self.num_tokens
    }

    /// Rows of q/k/v/out: [`Batch::num_tokens`], except for a reusable batch with fixed
    /// launch shapes, whose tensors have `max_tokens` rows (the step's are the first
    /// `num_tokens`).
    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn pool(&self) -> &'a Pool {
        self.pool
    }

    pub fn as_raw(&self) -> *mut sys::bspa_batch {
        self.raw.as_ptr()
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        // The caller (of the unsafe launches) made sure no launch still runs on a device.
        unsafe { sys::bspa_batch_destroy(self.raw.as_ptr()) }
    }
}
