//! `moe-oracle ep-plan`: the expert-parallel exchanges of a layer (`moe_reference::ep::EpPlan`) at a model's
//! shape: rows each rank sends each other rank in dispatch (and gets back in combine), and the bytes of the four
//! exchanges of a forward and backward pass, the figure a multi-GPU benchmark divides by its time.
//! Routing: k distinct experts per token, uniformly at random from a seed (a trained router is skewed; this
//! is the balanced case), or `--hot F`: that share of all slots goes to rank 0's experts.

use std::io::Write;

use clap::Args;
use moe_reference::dispatch::RowMap;
use moe_reference::ep::EpPlan;
use ndarray::Array2;

use crate::cli::CliError;
use crate::demo::XorShift;
use crate::golden::Preset;

#[derive(Debug, Args)]
pub struct EpPlanArgs {
    /// Model whose layer shape to use (H, E, k).
    #[arg(long, value_enum)]
    pub preset: Preset,
    /// Tokens each rank owns (the layer has this times --ep-ranks).
    #[arg(long, default_value_t = 16384)]
    pub tokens_per_rank: usize,
    /// Expert-parallel ranks (must divide the preset's experts).
    #[arg(long, default_value_t = 8)]
    pub ep_ranks: usize,
    /// Seed of the random routing.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Share of the slots routed to rank 0's experts (0: uniform over all experts).
    #[arg(long, default_value_t = 0.0)]
    pub hot: f64,
    /// Bytes per row element on the wire (2: bf16).
    #[arg(long, default_value_t = 2)]
    pub elem_bytes: usize,
}

/// At most this many tokens (the plan keeps a few words per row; 2^24 tokens x k 8 is ~1 GB of them).
const MAX_TOKENS: usize = 1 << 24;

/// k distinct experts per token: with probability `hot` one of the first `hot_experts`, else uniform.
fn routing(tokens: usize, experts: usize, k: usize, hot: f64, hot_experts: usize, seed: u64) -> Array2<i32> {
    let mut g = XorShift::new(seed);
    let mut ids = Array2::from_elem((tokens, k), -1i32);
    for t in 0..tokens {
        let mut chosen: Vec<usize> = Vec::with_capacity(k);
        while chosen.len() < k {
            let u = (g.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let pool = if u < hot && chosen.iter().filter(|&&e| e < hot_experts).count() < hot_experts { hot_experts } else { experts };
            let e = (g.next_u64() % pool as u64) as usize;
            if !chosen.contains(&e) {
                chosen.push(e);
            }
        }
        for (j, e) in chosen.into_iter().enumerate() {
            ids[[t, j]] = e as i32;
        }
    }
    ids
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1u64 << 20) as f64)
}

pub fn run(args: &EpPlanArgs) -> Result<(), CliError> {
    let layer = args.preset.layer();
    let (e, k, h, r) = (layer.experts, layer.top_k, layer.hidden, args.ep_ranks);
    let bad = |m: String| Err(CliError::Usage(m));
    if r == 0 {
        return bad("--ep-ranks 0: at least 1 rank".into());
    }
    if !e.is_multiple_of(r) {
        return bad(format!("--ep-ranks {r}: {}'s {e} experts must split evenly over the ranks", args.preset.name()));
    }
    let tokens = args.tokens_per_rank.saturating_mul(r);
    if tokens > MAX_TOKENS {
        return bad(format!("--tokens-per-rank {} x --ep-ranks {r}: at most {MAX_TOKENS} tokens in all", args.tokens_per_rank));
    }
    if !(0.0..=1.0).contains(&args.hot) {
        return bad(format!("--hot {}: a share between 0 and 1", args.hot));
    }
    if args.elem_bytes == 0 || args.elem_bytes > 8 {
        return bad(format!("--elem-bytes {}: 1 to 8", args.elem_bytes));
    }
    let ids = routing(tokens, e, k, args.hot, e / r, args.seed);
    let rows = RowMap::build(ids.view(), e);
    let plan = EpPlan::new(&rows, r).map_err(CliError::Usage)?;
    let counts = plan.counts();
    let tr = plan.traffic(h, args.elem_bytes);
    let mut o = std::io::stdout().lock();
    let _ = writeln!(
        o,
        "ep-plan {}: T {tokens} ({} per rank) over {r} ranks, E {e} ({} per rank), k {k}, H {h}: {} rows; routing {} (seed {})",
        args.preset.name(),
        args.tokens_per_rank,
        e / r,
        rows.rows(),
        if args.hot > 0.0 { format!("{:.0}% of slots to rank 0's experts", 100.0 * args.hot) } else { "uniform".into() },
        args.seed
    );
    let _ = writeln!(o, "rows sent in dispatch, [from token owner][to expert owner] (combine sends them back):");
    let _ = writeln!(o, "{:>8} {}", "", (0..r).map(|d| format!("{:>9}", format!("to {d}"))).collect::<String>());
    for (s, row) in counts.iter().enumerate() {
        let _ = writeln!(o, "{:>8} {}", format!("from {s}"), row.iter().map(|n| format!("{n:>9}")).collect::<String>());
    }
    let row_bytes = h * args.elem_bytes;
    let _ = writeln!(o, "per rank and pass, MiB leaving / arriving over the links (rows of {row_bytes} bytes; a rank's rows to itself stay local):");
    let _ = writeln!(o, "{:>6} {:>22} {:>22} {:>22} {:>22}", "rank", "dispatch fwd (x)", "combine fwd (o)", "dispatch bwd (do)", "combine bwd (dx)");
    let out_in = |m: &Vec<Vec<u64>>, a: usize| {
        let out: u64 = (0..r).filter(|&b| b != a).map(|b| m[a][b]).sum();
        let inn: u64 = (0..r).filter(|&b| b != a).map(|b| m[b][a]).sum();
        format!("{} / {}", mib(out), mib(inn))
    };
    for a in 0..r {
        let _ = writeln!(
            o,
            "{a:>6} {:>22} {:>22} {:>22} {:>22}",
            out_in(&tr.dispatch_fwd, a),
            out_in(&tr.combine_fwd, a),
            out_in(&tr.dispatch_bwd, a),
            out_in(&tr.combine_bwd, a)
        );
    }
    let _ = writeln!(o, "off-rank bytes of a forward+backward pass: {} MiB in all (routing metadata not counted)", mib(tr.off_rank_total()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_has_k_distinct_experts_and_a_hot_share() {
        let ids = routing(2000, 16, 4, 0.0, 4, 3);
        for t in 0..2000 {
            let mut row: Vec<i32> = ids.row(t).to_vec();
            row.sort();
            row.dedup();
            assert_eq!(row.len(), 4);
            assert!(row.iter().all(|&e| (0..16).contains(&e)));
        }
        let uniform = ids.iter().filter(|&&e| e < 4).count() as f64 / 8000.0;
        assert!((uniform - 0.25).abs() < 0.03, "{uniform}");
        let hot = routing(2000, 16, 2, 0.9, 4, 3);
        let share = hot.iter().filter(|&&e| e < 4).count() as f64 / 4000.0;
        assert!(share > 0.8, "{share}");
    }
}
