//! KV transfer between pools (bspa.h, "KV transfer between pools"): the memory description a
//! transport registers, exports that pin a prompt's cached pages ([`KvExport`]) and two-phase
//! imports ([`KvImport`]: dropped without [`KvImport::commit`], it aborts). bspa moves no
//! bytes: the caller's transport (NIXL, RDMA, a copy) moves `page_bytes` per (block, region)
//! between the addresses [`PoolMemory`] gives.

use std::os::raw::c_void;
use std::ptr::{self, NonNull};

use crate::error::{check, Error, Result};
use crate::pool::{Device, Pool};
use crate::sys;

/// Which half of a layer's storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kv {
    K = 0,
    V = 1,
}

/// Where a pool's pages live (`struct bspa_pool_memory`). Region `r = 2 * layer + kv` starts
/// at `base + r * region_bytes`; page `p` of region `r` is `page_bytes` at
/// `base + (r * num_pages + p) * page_bytes`. Plain numbers: send them to the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolMemory {
    pub device: Device,
    pub num_regions: i32,
    pub base: u64,
    pub bytes: u64,
    pub region_bytes: u64,
    pub page_bytes: u64,
    pub num_pages: i64,
    /// What must match for pages to be interchangeable (dtype, geometry, layout, key scheme
    /// and hash seed, fp8 scales); never 0.
    pub fingerprint: u64,
    pub layout_version: u32,
}

impl PoolMemory {
    fn device_id(&self) -> i32 {
        match self.device {
            Device::Cpu => 0,
            Device::Cuda(id) => id,
        }
    }

    /// The first byte of `page` in `layer`'s K or V, or `None` out of range.
    pub fn page_address(&self, layer: i32, kv: Kv, page: i64) -> Option<u64> {
        let r = 2 * i64::from(layer) + kv as i64;
        if layer < 0 || r >= i64::from(self.num_regions) || page < 0 || page >= self.num_pages {
            return None;
        }
        Some(self.base + (r as u64 * self.num_pages as u64 + page as u64) * self.page_bytes)
    }

    /// `(addr, len, device_id)` of each (layer, K/V) region (NIXL's registration form).
    pub fn regions(&self) -> Vec<(u64, u64, i32)> {
        (0..self.num_regions as u64)
            .map(|r| (self.base + r * self.region_bytes, self.region_bytes, self.device_id()))
            .collect()
    }

    /// One `(addr, page_bytes, device_id)` per (page, region): pages in the order given, each
    /// page's regions in order (layer 0 K, layer 0 V, ...). Both sides listing their pages of
    /// the same blocks get lists that pair up index by index. `None` for a page out of range.
    pub fn page_descs(&self, pages: &[i32]) -> Option<Vec<(u64, u64, i32)>> {
        let mut out = Vec::with_capacity(pages.len() * self.num_regions.max(0) as usize);
        for &p in pages {
            for r in 0..self.num_regions {
                let kv = if r % 2 == 0 { Kv::K } else { Kv::V };
                out.push((self.page_address(r / 2, kv, i64::from(p))?, self.page_bytes, self.device_id()));
            }
        }
        Some(out)
    }
}

/// What [`Pool::import_kv`] checks and keys by. `peer_fingerprint` is required.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions<'a> {
    /// The exporter's [`PoolMemory::fingerprint`].
    pub peer_fingerprint: u64,
    /// The exporter's keys ([`KvExport::keys`]), one per full page of the tokens; checked.
    pub peer_keys: Option<&'a [[u64; 2]]>,
    /// The prompt's salt and extra key, as its sequences use them.
    pub salt: &'a [u8],
    pub extra_key: u64,
}

impl Pool {
    /// Where the pages live and the fingerprint a peer must match.
    pub fn memory(&self) -> Result<PoolMemory> {
        let mut m = unsafe { std::mem::zeroed::<sys::bspa_pool_memory>() };
        m.version = sys::BSPA_POOL_MEMORY_VERSION;
        check(unsafe { sys::bspa_pool_memory(self.as_raw(), &mut m) })?;
        Ok(PoolMemory {
            device: if m.device_type == sys::kDLCUDA as i32 { Device::Cuda(m.device_id) } else { Device::Cpu },
            num_regions: m.num_regions,
            base: m.base,
            bytes: m.bytes,
            region_bytes: m.region_bytes,
            page_bytes: m.page_bytes,
            num_pages: m.num_pages,
            fingerprint: m.fingerprint,
            layout_version: m.layout_version,
        })
    }

    /// The first byte of `page` in `layer`'s K or V (`bspa_pool_page_address`, checked).
    pub fn page_address(&self, layer: i32, kv: Kv, page: i64) -> Result<u64> {
        let mut a = 0u64;
        check(unsafe { sys::bspa_pool_page_address(self.as_raw(), layer, kv as i32, page, &mut a) })?;
        Ok(a)
    }

    /// Pins every full cached page of the prompt (no n-1 cap; a miss exports none) until
    /// the [`KvExport`] is dropped.
    pub fn export_kv(&self, tokens: &[i32], salt: &[u8], extra_key: u64) -> Result<KvExport<'_>> {
        let mut options = unsafe { std::mem::zeroed::<sys::bspa_seq_options>() };
        check(unsafe { sys::bspa_seq_options_init(&mut options) })?;
        if !salt.is_empty() {
            options.salt = salt.as_ptr() as *const c_void;
            options.salt_len = salt.len();
        }
        options.extra_key = extra_key;
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::bspa_kv_export_create(&mut raw, self.as_raw(), &options, tokens.as_ptr(), tokens.len() as i64)
        })?;
        // Owned from here: an error below drops it, which releases the pins.
        let mut e = KvExport {
            raw: NonNull::new(raw).expect("bspa returned BSPA_OK and a NULL export"),
            pool: self,
            pages: Vec::new(),
            keys: Vec::new(),
        };
        let mut count = 0i64;
        check(unsafe { sys::bspa_kv_export_pages(e.raw.as_ptr(), ptr::null_mut(), ptr::null_mut(), 0, &mut count) })?;
        e.pages = vec![0i32; count as usize];
        e.keys = vec![[0u64; 2]; count as usize];
        check(unsafe {
            sys::bspa_kv_export_pages(
                e.raw.as_ptr(),
                e.pages.as_mut_ptr(),
                e.keys.as_mut_ptr() as *mut u64,
                count,
                &mut count,
            )
        })?;
        Ok(e)
    }

    /// Reserves pages for the full pages of `tokens` this pool lacks, after checking the
    /// exporter's fingerprint (and keys). Write them, then [`KvImport::commit`]; dropping
    /// the import aborts (the pages go back unpublished).
    pub fn import_kv(&self, tokens: &[i32], options: &ImportOptions<'_>) -> Result<KvImport<'_>> {
        let mut o = unsafe { std::mem::zeroed::<sys::bspa_kv_import_options>() };
        check(unsafe { sys::bspa_kv_import_options_init(&mut o) })?;
        if !options.salt.is_empty() {
            o.salt = options.salt.as_ptr() as *const c_void;
            o.salt_len = options.salt.len();
        }
        o.extra_key = options.extra_key;
        o.peer_fingerprint = options.peer_fingerprint;
        if let Some(keys) = options.peer_keys {
            o.peer_keys = keys.as_ptr() as *const u64;
            o.num_peer_keys = keys.len() as i64;
        }
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::bspa_kv_import_create(&mut raw, self.as_raw(), tokens.as_ptr(), tokens.len() as i64, &o)
        })?;
        let mut imp = KvImport {
            raw: NonNull::new(raw).expect("bspa returned BSPA_OK and a NULL import"),
            pool: self,
            pages: Vec::new(),
            blocks: Vec::new(),
            num_blocks: 0,
            num_cached: 0,
        };
        let mut count = 0i64;
        check(unsafe { sys::bspa_kv_import_pages(imp.raw.as_ptr(), ptr::null_mut(), ptr::null_mut(), 0, &mut count) })?;
        imp.pages = vec![0i32; count as usize];
        imp.blocks = vec![0i64; count as usize];
        check(unsafe {
            sys::bspa_kv_import_pages(
                imp.raw.as_ptr(),
                imp.pages.as_mut_ptr(),
                imp.blocks.as_mut_ptr(),
                count,
                &mut count,
            )
        })?;
        let info = imp.info()?;
        imp.num_blocks = info.num_blocks;
        imp.num_cached = info.num_cached;
        Ok(imp)
    }
}

/// A prompt's cached pages pinned for a transport to read; dropping it releases them (they
/// stay cached). Immutable: `Send + Sync`.
#[derive(Debug)]
pub struct KvExport<'p> {
    raw: NonNull<sys::bspa_kv_export>,
    pool: &'p Pool,
    pages: Vec<i32>,
    keys: Vec<[u64; 2]>,
}

unsafe impl Send for KvExport<'_> {}
unsafe impl Sync for KvExport<'_> {}

impl<'p> KvExport<'p> {
    /// Page ids in block order.
    pub fn pages(&self) -> &[i32] {
        &self.pages
    }
    /// Their keys, `[low, high]` 64 bits each.
    pub fn keys(&self) -> &[[u64; 2]] {
        &self.keys
    }
    /// Exported tokens: pages × page size.
    pub fn num_tokens(&self) -> usize {
        self.pages.len() * self.pool.options().page_size as usize
    }
    pub fn pool(&self) -> &'p Pool {
        self.pool
    }
}

impl Drop for KvExport<'_> {
    fn drop(&mut self) {
        unsafe { sys::bspa_kv_export_destroy(self.raw.as_ptr()) }
    }
}

/// The state of an import (`struct bspa_kv_import_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportInfo {
    pub num_blocks: i64,
    pub num_cached: i64,
    pub num_reserved: i64,
}

/// Pages reserved for the blocks of a prompt this pool lacks: block `blocks()[i]` goes into
/// page `pages()[i]`. [`KvImport::commit`] publishes them; [`KvImport::abort`] or dropping
/// the import frees them unpublished. Internally synchronised: `Send + Sync`.
#[derive(Debug)]
pub struct KvImport<'p> {
    raw: NonNull<sys::bspa_kv_import>,
    pool: &'p Pool,
    pages: Vec<i32>,
    blocks: Vec<i64>,
    num_blocks: i64,
    num_cached: i64,
}

unsafe impl Send for KvImport<'_> {}
unsafe impl Sync for KvImport<'_> {}

impl<'p> KvImport<'p> {
    pub fn pages(&self) -> &[i32] {
        &self.pages
    }
    pub fn blocks(&self) -> &[i64] {
        &self.blocks
    }
    /// Full pages of the prompt.
    pub fn num_blocks(&self) -> i64 {
        self.num_blocks
    }
    /// Leading blocks this pool already had (nothing to move).
    pub fn num_cached(&self) -> i64 {
        self.num_cached
    }
    pub fn pool(&self) -> &'p Pool {
        self.pool
    }

    pub fn info(&self) -> Result<ImportInfo> {
        let mut i = unsafe { std::mem::zeroed::<sys::bspa_kv_import_info>() };
        i.version = sys::BSPA_KV_IMPORT_INFO_VERSION;
        check(unsafe { sys::bspa_kv_import_info(self.raw.as_ptr(), &mut i) })?;
        if i.state != sys::BSPA_KV_IMPORT_RESERVED as i32 {
            return Err(Error::new(sys::BSPA_ERR_INTERNAL, format!("a live KvImport in state {}", i.state)));
        }
        Ok(ImportInfo { num_blocks: i.num_blocks, num_cached: i.num_cached, num_reserved: i.num_reserved })
    }

    /// The transport wrote every reserved page: publishes them (verified against their
    /// tokens) and returns how many entered the prefix index. Consumes the import.
    pub fn commit(self) -> Result<usize> {
        let mut published = 0i64;
        check(unsafe { sys::bspa_kv_import_commit(self.raw.as_ptr(), &mut published) })?;
        Ok(published as usize)
    }

    /// The transfer failed: frees the reserved pages unpublished (as dropping does).
    pub fn abort(self) -> Result<()> {
        check(unsafe { sys::bspa_kv_import_abort(self.raw.as_ptr()) })
    }
}

impl Drop for KvImport<'_> {
    fn drop(&mut self) {
        // Aborts a reservation still open; after commit or abort it only frees.
        unsafe { sys::bspa_kv_import_destroy(self.raw.as_ptr()) }
    }
}
