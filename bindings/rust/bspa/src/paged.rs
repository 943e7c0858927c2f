//! Bring-your-own cache: the prefill attention over caller-owned pages
//! (`bspa_prefill_paged`), and the size of its optional workspace.
use std::os::raw::c_void;
use std::ptr;

use crate::error::{check, Error, Result};
use crate::layout::Layout;
use crate::pool::Device;
use crate::sys;
use crate::tensor::{host_tensor, Element, DL_INT32, DL_UINT8};

/// Bytes of the optional workspace of [`prefill_paged`] for launches on `device` with
/// `head_dim`: 0 where no launch uses one (the CPU; a GPU, build or head_dim without the
/// Hopper kernel), about 27 MB for head_dim 128 on an H200. Any thread; the answer is
/// fixed per device and head_dim.
///
/// Errors: `InvalidArgument` (head_dim <= 0), `NoDevice` (no such CUDA device), `Cuda`.
pub fn prefill_workspace_bytes(device: Device, head_dim: i32) -> Result<usize> {
    let (device_type, device_id) = device.raw();
    let mut bytes = 0usize;
    check(unsafe { sys::bspa_prefill_workspace_bytes(device_type, device_id, head_dim, &mut bytes) })?;
    Ok(bytes)
}

/// The arguments of [`prefill_paged`], as raw tensors (`bspa_paged_args`). All tensors
/// live on one device, the integer metadata included; the struct borrows them for the call
/// only (the library keeps no pointer).
#[derive(Debug)]
pub struct PagedArgs<'a> {
    /// `[T_new, Hq, head_dim]` of the pages' dtype (bf16 or f16 over FP8 pages), last
    /// dimension contiguous; `Hq` is the layout's head count and a multiple of
    /// `num_kv_heads`.
    pub q: &'a sys::DLTensor,
    /// Like `q`; written by the launch.
    pub out: &'a mut sys::DLTensor,
    /// Optional `[Hq, T_new]` float32: the natural log of each row's softmax denominator.
    pub lse: Option<&'a mut sys::DLTensor>,
    /// `[num_pages, num_kv_heads, page_size, head_dim]`, last dimension contiguous.
    pub k_pages: &'a sys::DLTensor,
    /// Like `k_pages`.
    pub v_pages: &'a sys::DLTensor,
    /// int32 `[num_seqs, max_pages_per_seq]`: sequence `i`'s token `t` lives in page
    /// `block_table[i][t / page_size]` at slot `t % page_size`.
    pub block_table: &'a sys::DLTensor,
    /// int32 `[num_seqs + 1]`, compact: rows of q/out, `query_starts[0] == 0`.
    pub query_starts: &'a sys::DLTensor,
    /// int32 `[num_seqs]`, compact: tokens before the new ones. Sequence `i` has
    /// `context_lens[i] + query_len_i` tokens in its pages, the new tokens' K/V included.
    pub context_lens: &'a sys::DLTensor,
    /// An upper bound of the query lengths (sizes the CUDA grid).
    pub max_query_len: i32,
    pub layout: &'a Layout,
    /// Multiplies the logits (Phi-3-small: 1/128).
    pub scale: f32,
    /// Optional uint8 `[n]` scratch on the tensors' device, 16-byte aligned,
    /// `n >= prefill_workspace_bytes(..)` (a smaller one splits less or not at all).
    pub workspace: Option<&'a mut sys::DLTensor>,
    /// FP8 pages (`k_pages`/`v_pages` of e4m3 bytes, dtype float8_e4m3fn or uint8; `q` and
    /// `out` bf16 or f16 then): float32 `[num_kv_heads]` dequantization scales on the
    /// tensors' device, element `x` of KV head `h` reading as `k_scale[h] * e4m3(x)`
    /// (`v_scale` for V). Both required with FP8 pages, `None` otherwise.
    pub k_scale: Option<&'a sys::DLTensor>,
    /// See `k_scale`.
    pub v_scale: Option<&'a sys::DLTensor>,
    /// The longest query among the sequences the caller treats as decode rows (1 for plain
    /// decode; 0: no bound, i.e. 8). On CUDA only sequences of up to that many new tokens
    /// (at most 8) take the decode kernel, whose tile it sizes, and longer ones the prefill
    /// kernel. A hint: any value gives a correct result (the CPU ignores it); negative is
    /// `InvalidArgument`.
    pub max_decode_query_len: i32,
}

/// `bspa_prefill_paged` on raw tensors: block-sparse causal attention of the new tokens
/// over caller-owned pages, the same attention as [`Pool::prefill`](crate::Pool::prefill).
///
/// Errors: as `Pool::prefill`, plus, for the workspace, `ShapeMismatch`, `DtypeMismatch`,
/// `DeviceMismatch`, `NullPointer` and `InvalidArgument` (not 16-byte aligned); on the CPU
/// out-of-range page ids or lengths in the metadata are `OutOfRange`; on every device, q
/// rows with no sequence or `max_query_len` 0 are `OutOfRange`. FP8 pages without both
/// scales are `NullPointer`, scales with other pages `InvalidArgument`, a scale that is not
/// finite and positive `InvalidArgument` on the CPU (on CUDA the values are the caller's).
///
/// # Safety
/// The tensors' data (and `layout`: a CSR layout's device copy is freed with it) must be
/// valid for their shapes, dtypes and device, and stay alive until the launch completes on
/// `stream`; `stream` must be a stream of the tensors' device (or null). On CUDA the
/// metadata's page ids and lengths must be in range (the kernel does not read them back to
/// check). Launches that share a workspace must not overlap: its contents are the launch's
/// until it completes on `stream`.
pub unsafe fn prefill_paged(args: PagedArgs<'_>, stream: sys::bspa_stream) -> Result<()> {
    let mut raw = std::mem::zeroed::<sys::bspa_paged_args>();
    check(sys::bspa_paged_args_init(&mut raw))?;
    raw.q = args.q;
    raw.out = args.out;
    raw.lse = args.lse.map_or(ptr::null_mut(), |t| t as *mut sys::DLTensor);
    raw.k_pages = args.k_pages;
    raw.v_pages = args.v_pages;
    raw.block_table = args.block_table;
    raw.query_starts = args.query_starts;
    raw.context_lens = args.context_lens;
    raw.max_query_len = args.max_query_len;
    raw.layout = args.layout.as_raw();
    raw.scale = args.scale;
    raw.workspace = args.workspace.map_or(ptr::null_mut(), |t| t as *mut sys::DLTensor);
    raw.k_scale = args.k_scale.map_or(ptr::null(), |t| t as *const sys::DLTensor);
    raw.v_scale = args.v_scale.map_or(ptr::null(), |t| t as *const sys::DLTensor);
    raw.max_decode_query_len = args.max_decode_query_len;
    check(sys::bspa_prefill_paged(&raw, stream))
}

/// The arguments of [`prefill_paged_host`]: [`PagedArgs`] over host slices, all
/// row-major. `num_pages` is `k_pages.len() / (num_kv_heads * page_size * head_dim)`,
/// `num_seqs` is `context_lens.len()`, `T_new` is `q.len() / (Hq * head_dim)` with
/// `Hq = layout.num_heads()`, and `max_query_len` is the largest query length of
/// `query_starts`.
#[derive(Debug)]
pub struct HostPagedArgs<'a, T: Element> {
    /// `[T_new, Hq, head_dim]`.
    pub q: &'a [T],
    /// Like `q`; written.
    pub out: &'a mut [T],
    /// Optional `[Hq, T_new]`; written.
    pub lse: Option<&'a mut [f32]>,
    /// `[num_pages, num_kv_heads, page_size, head_dim]`.
    pub k_pages: &'a [T],
    /// Like `k_pages`.
    pub v_pages: &'a [T],
    pub num_kv_heads: usize,
    pub page_size: usize,
    pub head_dim: usize,
    /// `[num_seqs, max_pages_per_seq]`: sequence `i`'s token `t` lives in page
    /// `block_table[i * max_pages_per_seq + t / page_size]` at slot `t % page_size`.
    pub block_table: &'a [i32],
    /// `[num_seqs + 1]`: rows of q/out, `query_starts[0] == 0`.
    pub query_starts: &'a [i32],
    /// `[num_seqs]`: tokens before the new ones (whose K/V are in the pages too).
    pub context_lens: &'a [i32],
    pub layout: &'a Layout,
    pub scale: f32,
    /// Optional, 16-byte aligned: the CPU uses none (its [`prefill_workspace_bytes`] is 0)
    /// but checks one it is given. An empty slice counts as none.
    pub workspace: Option<&'a mut [u8]>,
}

fn shape_error(message: String) -> Error {
    Error::new(sys::BSPA_ERR_SHAPE_MISMATCH, message)
}

/// [`prefill_paged`] on host slices (the CPU backend, which checks every page id and length
/// of the metadata): safe. The slices' lengths must match the shapes described in
/// [`HostPagedArgs`], else `ShapeMismatch` before the library is called; the library's
/// errors otherwise (e.g. `OutOfRange` for a page id past `num_pages`).
pub fn prefill_paged_host<T: Element>(args: HostPagedArgs<'_, T>) -> Result<()> {
    let HostPagedArgs {
        q,
        out,
        lse,
        k_pages,
        v_pages,
        num_kv_heads,
        page_size,
        head_dim,
        block_table,
        query_starts,
        context_lens,
        layout,
        scale,
        workspace,
    } = args;
    let page_elems =
        num_kv_heads.checked_mul(page_size).and_then(|n| n.checked_mul(head_dim)).filter(|&n| n > 0).ok_or_else(
            || {
                shape_error(format!(
                    "prefill_paged_host: num_kv_heads = {}, page_size = {}, head_dim = {}: each must be at least 1",
                    num_kv_heads, page_size, head_dim
                ))
            },
        )?;
    if k_pages.len() % page_elems != 0 || v_pages.len() != k_pages.len() {
        return Err(shape_error(format!(
            "k_pages has {} and v_pages {} elements, expected the same multiple of [num_kv_heads, page_size, head_dim] = [{}, {}, {}]",
            k_pages.len(),
            v_pages.len(),
            num_kv_heads,
            page_size,
            head_dim
        )));
    }
    let num_pages = k_pages.len() / page_elems;
    let heads = layout.num_heads().max(0) as usize;
    let row_elems = heads.checked_mul(head_dim).unwrap_or(0);
    if row_elems == 0 || q.len() % row_elems != 0 {
        return Err(shape_error(format!(
            "q has {} elements, not a multiple of [Hq, head_dim] = [{}, {}]",
            q.len(),
            heads,
            head_dim
        )));
    }
    let rows = q.len() / row_elems;
    if out.len() != q.len() {
        return Err(shape_error(format!("out has {} elements but q has {}", out.len(), q.len())));
    }
    let num_seqs = context_lens.len();
    if query_starts.len() != num_seqs + 1 {
        return Err(shape_error(format!(
            "query_starts has {} entries, expected len(context_lens) + 1 = {}",
            query_starts.len(),
            num_seqs + 1
        )));
    }
    let max_pages = block_table.len().checked_div(num_seqs).unwrap_or(0);
    if block_table.len() != num_seqs * max_pages {
        return Err(shape_error(format!(
            "block_table has {} entries, not a multiple of the {} sequences",
            block_table.len(),
            num_seqs
        )));
    }
    let max_query_len =
        query_starts.windows(2).map(|w| w[1] as i64 - w[0] as i64).max().unwrap_or(0).clamp(0, i32::MAX as i64) as i32;

    let mut shape_q = [rows as i64, heads as i64, head_dim as i64];
    let mut shape_out = shape_q;
    let mut shape_lse = [heads as i64, rows as i64];
    let mut shape_k = [num_pages as i64, num_kv_heads as i64, page_size as i64, head_dim as i64];
    let mut shape_v = shape_k;
    let mut shape_bt = [num_seqs as i64, max_pages as i64];
    let mut shape_qs = [query_starts.len() as i64];
    let mut shape_cl = [num_seqs as i64];
    let tq = host_tensor(q.as_ptr() as *mut c_void, T::dl_dtype(), &mut shape_q);
    let mut tout = host_tensor(out.as_mut_ptr() as *mut c_void, T::dl_dtype(), &mut shape_out);
    let mut tlse = match lse {
        Some(lse) => {
            if lse.len() != heads * rows {
                return Err(shape_error(format!(
                    "lse has {} elements, expected [{}, {}] = {}",
                    lse.len(),
                    heads,
                    rows,
                    heads * rows
                )));
            }
            Some(host_tensor(lse.as_mut_ptr() as *mut c_void, f32::dl_dtype(), &mut shape_lse))
        }
        None => None,
    };
    let tk = host_tensor(k_pages.as_ptr() as *mut c_void, T::dl_dtype(), &mut shape_k);
    let tv = host_tensor(v_pages.as_ptr() as *mut c_void, T::dl_dtype(), &mut shape_v);
    let tbt = host_tensor(block_table.as_ptr() as *mut c_void, DL_INT32, &mut shape_bt);
    let tqs = host_tensor(query_starts.as_ptr() as *mut c_void, DL_INT32, &mut shape_qs);
    let tcl = host_tensor(context_lens.as_ptr() as *mut c_void, DL_INT32, &mut shape_cl);
    let mut shape_ws = [0i64];
    let mut tws = match workspace {
        Some(ws) if !ws.is_empty() => {
            shape_ws[0] = ws.len() as i64;
            Some(host_tensor(ws.as_mut_ptr() as *mut c_void, DL_UINT8, &mut shape_ws))
        }
        _ => None,
    };
    // Every tensor describes exactly its slice, the slices outlive the call, and a CPU
    // launch is synchronous and checks each page id and length against the shapes.
    unsafe {
        prefill_paged(
            PagedArgs {
                q: &tq,
                out: &mut tout,
                lse: tlse.as_mut(),
                k_pages: &tk,
                v_pages: &tv,
                block_table: &tbt,
                query_starts: &tqs,
                context_lens: &tcl,
                max_query_len,
                layout,
                scale,
                workspace: tws.as_mut(),
                k_scale: None,
                v_scale: None,
                max_decode_query_len: 0,
            },
            ptr::null_mut(),
        )
    }
}
