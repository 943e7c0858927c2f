//! A two-turn conversation with a shared prefix on the CPU backend: the second turn
//! reuses the first turn's cached pages and computes only its new tokens.
//!
//!     cargo run --example two_turns

use bspa::{DType, Layout, Pool, PoolOptions, StridedOptions};

const HQ: usize = 4;
const HKV: usize = 2;
const D: usize = 64;

/// Stand-ins for a model's projections: deterministic per (position, head, dim), so the
/// shared prefix has the same K/V in both turns.
fn rows(start: usize, n: usize, heads: usize, salt: f32) -> Vec<f32> {
    (0..n * heads * D).map(|i| (((start * heads * D + i) as f32) * 0.618 + salt).sin()).collect()
}

fn turn(pool: &Pool, layout: &Layout, prompt: &[i32]) -> bspa::Result<usize> {
    let seq = pool.sequence()?;
    let cached = seq.match_prefix(prompt)?;
    seq.append(&prompt[cached..])?;
    let new = prompt.len() - cached;
    let mut out = vec![0f32; new * HQ * D];
    {
        let batch = pool.batch(&[&seq], &[new as i32])?;
        pool.kv_write_host(&batch, 0, &rows(cached, new, HKV, 1.0), &rows(cached, new, HKV, 2.0))?;
        pool.prefill_host(&batch, 0, layout, &rows(cached, new, HQ, 3.0), &mut out, 1.0 / 8.0, None)?;
    }
    seq.commit(prompt.len())?;
    println!("prompt {:4} tokens: {:4} cached, {:4} computed, out[0] = {:+.4}", prompt.len(), cached, new, out[0]);
    Ok(cached)
}

fn main() -> bspa::Result<()> {
    let pool = Pool::new(&PoolOptions {
        dtype: DType::F32,
        num_kv_heads: HKV as i32,
        head_dim: D as i32,
        page_size: 16,
        num_pages: 64,
        ..Default::default()
    })?;
    let layout = Layout::strided(&StridedOptions {
        block_size: 16,
        local_blocks: 4,
        vert_stride: 4,
        num_heads_total: HQ as i32,
        num_heads: HQ as i32,
        ..Default::default()
    })?;
    let system_and_question: Vec<i32> = (0..300).map(|t| (t * 7919) % 32000).collect();
    let mut second_turn = system_and_question.clone();
    second_turn.extend((0..120).map(|t| 1000 + t));
    turn(&pool, &layout, &system_and_question)?;
    let cached = turn(&pool, &layout, &second_turn)?;
    println!("cached tokens in turn 2: {}", cached);
    let stats = pool.stats()?;
    println!("pool: {} hits, {} matched tokens of {} queried", stats.hits, stats.matched_tokens, stats.queried_tokens);
    Ok(())
}
