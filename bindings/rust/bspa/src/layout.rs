use std::ptr::{self, NonNull};

use crate::error::{check, check_abi, Error, Result};
use crate::sys;

/// Options of [`Layout::strided`]: Phi-3-small's local + vertical-stride rule
///
/// `allowed(h, qb, kb) = kb <= qb && (qb - kb < local_blocks || (kb + g*s + 1) % vert_stride == 0)`
/// with `g = head_begin + h` and `s = homo_head ? 0 : max(1, vert_stride / num_heads_total)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StridedOptions {
    pub block_size: i32,
    pub local_blocks: i32,
    pub vert_stride: i32,
    pub homo_head: bool,
    pub num_heads_total: i32,
    pub head_begin: i32,
    pub num_heads: i32,
}

impl Default for StridedOptions {
    /// The library's defaults: Phi-3-small (block 64, 16 local blocks, stride 8, 32 heads).
    fn default() -> Self {
        let mut raw = unsafe { std::mem::zeroed::<sys::bspa_layout_strided_options>() };
        unsafe { sys::bspa_layout_strided_options_init(&mut raw) };
        StridedOptions {
            block_size: raw.block_size,
            local_blocks: raw.local_blocks,
            vert_stride: raw.vert_stride,
            homo_head: raw.homo_head != 0,
            num_heads_total: raw.num_heads_total,
            head_begin: raw.head_begin,
            num_heads: raw.num_heads,
        }
    }
}

/// Which key blocks each query block of each head may see. Immutable, so `Send + Sync`.
#[derive(Debug)]
pub struct Layout {
    raw: NonNull<sys::bspa_layout>,
    num_heads: i32,
}

// The header: layouts are immutable after creation and may be shared freely.
unsafe impl Send for Layout {}
unsafe impl Sync for Layout {}

impl Layout {
    fn wrap(raw: *mut sys::bspa_layout, num_heads: i32) -> Layout {
        Layout { raw: NonNull::new(raw).expect("bspa returned BSPA_OK and a NULL layout"), num_heads }
    }

    pub fn strided(options: &StridedOptions) -> Result<Layout> {
        check_abi()?;
        let mut raw = unsafe { std::mem::zeroed::<sys::bspa_layout_strided_options>() };
        check(unsafe { sys::bspa_layout_strided_options_init(&mut raw) })?;
        raw.block_size = options.block_size;
        raw.local_blocks = options.local_blocks;
        raw.vert_stride = options.vert_stride;
        raw.homo_head = options.homo_head as i32;
        raw.num_heads_total = options.num_heads_total;
        raw.head_begin = options.head_begin;
        raw.num_heads = options.num_heads;
        let mut layout = ptr::null_mut();
        check(unsafe { sys::bspa_layout_create_strided(&mut layout, &raw) })?;
        Ok(Layout::wrap(layout, options.num_heads))
    }

    /// Dense causal attention over `num_heads` heads.
    pub fn dense(num_heads: i32) -> Result<Layout> {
        check_abi()?;
        let mut layout = ptr::null_mut();
        check(unsafe { sys::bspa_layout_create_dense(&mut layout, num_heads) })?;
        Ok(Layout::wrap(layout, num_heads))
    }

    /// A caller's own layout in per-head CSR form: `crow` is `[num_heads][num_block_rows + 1]`
    /// absolute offsets into `col` (see `bspa_layout_create_csr`).
    pub fn csr(num_heads: i32, block_size: i32, num_block_rows: i32, crow: &[i32], col: &[i32]) -> Result<Layout> {
        check_abi()?;
        let rows = num_block_rows.max(0) as usize + 1;
        if num_heads < 1 || crow.len() != num_heads as usize * rows {
            return Err(Error::new(
                sys::BSPA_ERR_INVALID_ARGUMENT,
                format!(
                    "crow has {} entries, expected num_heads * (num_block_rows + 1) = {} * {}",
                    crow.len(),
                    num_heads,
                    rows
                ),
            ));
        }
        if let Some(bad) = crow.iter().find(|&&c| c < 0 || c as usize > col.len()) {
            return Err(Error::new(
                sys::BSPA_ERR_INVALID_ARGUMENT,
                format!("crow entry {} lies outside col (length {})", bad, col.len()),
            ));
        }
        let mut layout = ptr::null_mut();
        check(unsafe {
            sys::bspa_layout_create_csr(&mut layout, num_heads, block_size, num_block_rows, crow.as_ptr(), col.as_ptr())
        })?;
        Ok(Layout::wrap(layout, num_heads))
    }

    pub fn num_heads(&self) -> i32 {
        self.num_heads
    }

    /// Whether query block `q_block` of local head `head` may see key block `k_block`.
    pub fn allowed(&self, head: i32, q_block: i64, k_block: i64) -> Result<bool> {
        let mut allowed = 0;
        check(unsafe { sys::bspa_layout_allowed(self.raw.as_ptr(), head, q_block, k_block, &mut allowed) })?;
        Ok(allowed != 0)
    }

    pub fn as_raw(&self) -> *const sys::bspa_layout {
        self.raw.as_ptr()
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        unsafe { sys::bspa_layout_destroy(self.raw.as_ptr()) }
    }
}
