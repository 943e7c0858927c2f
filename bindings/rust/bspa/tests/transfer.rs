//! KV transfer between two CPU pools through the safe crate: export, import with a copy as
//! the transport, commit; the importer's next turn hits the whole prefix with output bitwise
//! equal to the exporter's; dropping an import aborts it; fingerprints and keys are checked.

use bspa::{DType, ErrorKind, ImportOptions, Kv, Layout, Pool, PoolOptions};

const HQ: usize = 4;
const HKV: usize = 2;
const D: usize = 16;
const PAGE: i32 = 16;
const LAYERS: i32 = 2;

fn pool(num_pages: i64, head_dim: i32) -> Pool {
    Pool::new(&PoolOptions {
        dtype: DType::F32,
        num_layers: LAYERS,
        num_kv_heads: HKV as i32,
        head_dim,
        page_size: PAGE,
        num_pages,
        ..Default::default()
    })
    .expect("pool")
}

/// Deterministic per (position, layer, which): every pool computes the same KV for a position.
fn rows(start: usize, n: usize, heads: usize, layer: i32, which: u32) -> Vec<f32> {
    (start * heads * D..(start + n) * heads * D)
        .map(|i| ((i as f64) * 0.618 + 10.0 * layer as f64 + which as f64).sin() as f32)
        .collect()
}

fn prompt(n: usize) -> Vec<i32> {
    (0..n as i32).map(|i| i * 7919 % 32000).collect()
}

/// One turn over `tokens`: match, append the rest, compute; returns (cached, outputs of every layer).
fn turn(pool: &Pool, layout: &Layout, tokens: &[i32]) -> (usize, Vec<f32>) {
    let seq = pool.sequence().unwrap();
    let cached = seq.match_prefix(tokens).unwrap();
    seq.append(&tokens[cached..]).unwrap();
    let n = tokens.len() - cached;
    let mut all = Vec::new();
    {
        let batch = pool.batch(&[&seq], &[n as i32]).unwrap();
        for layer in 0..LAYERS {
            let mut out = vec![f32::NAN; n * HQ * D];
            pool.kv_write_host(&batch, layer, &rows(cached, n, HKV, layer, 1), &rows(cached, n, HKV, layer, 2))
                .unwrap();
            pool.prefill_host(&batch, layer, layout, &rows(cached, n, HQ, layer, 3), &mut out, 0.125, None).unwrap();
            all.extend(out);
        }
    }
    seq.commit(tokens.len()).unwrap();
    (cached, all)
}

/// Copies every reserved block's pages (all layers, K and V) from src to dst.
fn transfer(src: &Pool, exported: &[i32], dst: &Pool, imp: &bspa::KvImport<'_>) -> u64 {
    let (ms, md) = (src.memory().unwrap(), dst.memory().unwrap());
    let src_pages: Vec<i32> = imp.blocks().iter().map(|&b| exported[b as usize]).collect();
    let from = ms.page_descs(&src_pages).unwrap();
    let to = md.page_descs(imp.pages()).unwrap();
    assert_eq!(from.len(), to.len());
    let mut bytes = 0;
    for (&(s, n, _), &(d, m, _)) in from.iter().zip(to.iter()) {
        assert_eq!(n, m);
        // SAFETY: both ranges are pages of live pools: the exporter's pinned by the export,
        // the importer's reserved for this import; nothing else writes them meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(s as usize as *const u8, d as usize as *mut u8, n as usize) };
        bytes += n;
    }
    bytes
}

#[test]
fn roundtrip_hits_the_whole_prefix_bitwise() {
    let layout = Layout::dense(HQ as i32).unwrap();
    let (exporter, importer) = (pool(48, D as i32), pool(20, D as i32));
    let p = prompt(7 * PAGE as usize + 5);
    turn(&exporter, &layout, &p);
    // Fragment the importer: another prompt's cached pages and a live sequence.
    let other: Vec<i32> = (0..3 * PAGE).map(|i| 500_000 + i).collect();
    turn(&importer, &layout, &other);
    let live = importer.sequence().unwrap();
    live.append(&other[..20]).unwrap();

    let m = exporter.memory().unwrap();
    assert_eq!(m.page_address(1, Kv::V, 3), Some(exporter.page_address(1, Kv::V, 3).unwrap()));
    assert_eq!(m.regions().len(), 2 * LAYERS as usize);
    let export = exporter.export_kv(&p, &[], 0).unwrap();
    assert_eq!(export.pages().len(), 7, "every full page, no n-1 cap");
    let options =
        ImportOptions { peer_fingerprint: m.fingerprint, peer_keys: Some(export.keys()), ..Default::default() };
    let imp = importer.import_kv(&p[..export.num_tokens()], &options).unwrap();
    assert_eq!((imp.num_blocks(), imp.num_cached()), (7, 0));
    let bytes = transfer(&exporter, export.pages(), &importer, &imp);
    assert_eq!(bytes, 7 * 2 * LAYERS as u64 * m.page_bytes);
    assert_eq!(imp.commit().unwrap(), 7);
    drop(export);
    importer.check().unwrap();

    let next: Vec<i32> = p.iter().copied().chain(40_000..40_020).collect();
    let (ca, oa) = turn(&exporter, &layout, &next);
    let (cb, ob) = turn(&importer, &layout, &next);
    assert_eq!((ca, cb), (7 * PAGE as usize, 7 * PAGE as usize));
    assert!(oa.iter().zip(ob.iter()).all(|(a, b)| a.to_bits() == b.to_bits()), "outputs differ bit for bit");
    drop(live);
    importer.check().unwrap();
}

#[test]
fn dropping_an_import_aborts_and_partial_overlap_moves_only_the_rest() {
    let layout = Layout::dense(HQ as i32).unwrap();
    let (exporter, importer) = (pool(32, D as i32), pool(32, D as i32));
    let p = prompt(6 * PAGE as usize);
    turn(&exporter, &layout, &p);
    let fp = exporter.memory().unwrap().fingerprint;
    let options = ImportOptions { peer_fingerprint: fp, ..Default::default() };
    let before = importer.stats().unwrap();
    {
        let imp = importer.import_kv(&p, &options).unwrap();
        assert_eq!(importer.stats().unwrap().pages_in_use, 6);
        drop(imp); // a failed transfer
    }
    assert_eq!(importer.stats().unwrap(), before);
    importer.check().unwrap();
    importer.import_kv(&p, &options).unwrap().abort().unwrap();
    assert_eq!(importer.stats().unwrap(), before);

    // The importer computes the first 2 pages itself; the import moves pages 2..5.
    turn(&importer, &layout, &p[..2 * PAGE as usize + 3]);
    let export = exporter.export_kv(&p, &[], 0).unwrap();
    let imp = importer.import_kv(&p, &options).unwrap();
    assert_eq!(imp.num_cached(), 2);
    assert_eq!(imp.blocks(), &[2, 3, 4, 5]);
    transfer(&exporter, export.pages(), &importer, &imp);
    assert_eq!(imp.commit().unwrap(), 4);
    let next: Vec<i32> = p.iter().copied().chain(9..19).collect();
    let (ca, oa) = turn(&exporter, &layout, &next);
    let (cb, ob) = turn(&importer, &layout, &next);
    assert_eq!((ca, cb), (6 * PAGE as usize, 6 * PAGE as usize));
    assert!(oa.iter().zip(ob.iter()).all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn mismatched_fingerprints_and_keys_are_refused() {
    let (a, b) = (pool(16, D as i32), pool(16, 2 * D as i32));
    let p = prompt(3 * PAGE as usize);
    let fa = a.memory().unwrap().fingerprint;
    assert_ne!(fa, b.memory().unwrap().fingerprint);
    assert_eq!(fa, pool(5, D as i32).memory().unwrap().fingerprint);
    let e = b.import_kv(&p, &ImportOptions { peer_fingerprint: fa, ..Default::default() }).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains("peer_fingerprint"), "{}", e.message());
    let keys = [[0u64; 2]; 3];
    let e = a
        .import_kv(&p, &ImportOptions { peer_fingerprint: fa, peer_keys: Some(&keys), ..Default::default() })
        .unwrap_err();
    assert!(e.message().contains("peer_keys[0]"), "{}", e.message());
    assert_eq!(a.stats().unwrap().pages_in_use, 0);
    assert_eq!(a.page_address(LAYERS, Kv::K, 0).unwrap_err().kind(), ErrorKind::OutOfRange);
    a.check().unwrap();
}
