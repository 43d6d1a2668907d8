//! The expert-parallel model (`moe_reference::ep`, issue #7's oracle part): the layer run rank by rank through
//! explicit dispatch and combine exchanges equals the single-rank layer bit for bit (proptest over shapes,
//! routing modes and every rank count that divides E; skewed routing, ranks that own no tokens or receive no
//! rows, all slots -1); every dispatched row travels exactly once; the exchange counts and bytes of a
//! hand-worked case.

mod common;

use common::*;
use moe_reference::dispatch::RowMap;
use moe_reference::MoeConfig;
use moe_reference::ep::{self, EpPlan};
use moe_reference::layer::{self, LayerInputs, Options};
use ndarray::{array, Array, Array2, Dimension};
use proptest::prelude::*;

#[track_caller]
fn same_bits<D: Dimension>(name: &str, a: &Array<f64, D>, b: &Array<f64, D>) {
    assert_eq!(a.shape(), b.shape(), "{name}: shapes differ");
    for ((idx, x), y) in a.indexed_iter().zip(b.iter()) {
        assert!(x.to_bits() == y.to_bits(), "{name}{idx:?}: ranks {x:e} vs single rank {y:e}");
    }
}

/// `ep::run` over `ranks` ranks against `layer::forward` + `layer::backward` on one: every output and gradient.
#[track_caller]
fn matches_single_rank(inp: &LayerInputs, ranks: usize) {
    let opt = Options::default();
    let fwd = layer::forward(inp, opt);
    let run = ep::run(inp, opt, ranks).expect("a valid rank count");
    same_bits("y", &run.y, &fwd.y);
    if let Some(dy) = &inp.dy {
        let bwd = layer::backward(inp, &fwd, dy.view(), opt);
        same_bits("grad.x", run.grad_x.as_ref().unwrap(), &bwd.grad_x);
        same_bits("grad.w13", run.grad_w13.as_ref().unwrap(), &bwd.grad_w13);
        same_bits("grad.w2", run.grad_w2.as_ref().unwrap(), &bwd.grad_w2);
        same_bits("grad.topk_weights", run.grad_topk_weights.as_ref().unwrap(), &bwd.grad_topk_weights);
        match (&run.grad_router_weight, &bwd.grad_router_weight) {
            (Some(a), Some(b)) => same_bits("grad.router.weight", a, b),
            (None, None) => {}
            _ => panic!("grad.router.weight present on one side only"),
        }
    }
    // every dispatched row travels exactly once, from its token's owner to its expert's owner
    let plan = &run.plan;
    let mut seen = vec![0usize; plan.row_src.len()];
    for s in 0..ranks {
        for d in 0..ranks {
            for r in plan.pair_rows(s, d) {
                seen[r] += 1;
            }
        }
    }
    assert!(seen.iter().all(|&n| n == 1), "a row sent other than once: {seen:?}");
    let total: usize = plan.counts().iter().flatten().sum();
    assert_eq!(total, plan.row_src.len());
}

type Shape = (usize, usize, usize, usize, usize, u8, u8, u64);

fn shape() -> impl Strategy<Value = Shape> {
    (0usize..=10, 1usize..=12, 1usize..=8, 1usize..=8, 1usize..=8, any::<u8>(), any::<u8>(), any::<u64>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn every_rank_count_gives_the_single_rank_bits(s in shape(), pick in any::<usize>()) {
        let inp = build(&Spec::from_tuple(s, Kind::Bf16));
        let divisors: Vec<usize> = (1..=inp.cfg.experts).filter(|&d| inp.cfg.experts.is_multiple_of(d)).collect();
        matches_single_rank(&inp, divisors[pick % divisors.len()]);
    }
}

#[test]
fn skewed_and_empty_ranks_and_unused_slots() {
    // 8 experts over 4 ranks; every token routes to experts 0 and 1 (rank 0): ranks 1-3 receive no rows
    let cfg = MoeConfig::swiglu(6, 8, 4, 8, 2);
    let ids = Array2::from_shape_fn((6, 2), |(_, j)| j as i32);
    matches_single_rank(&given_case(cfg.clone(), ids, 1), 4);
    // fewer tokens than ranks: ranks 1-7 own no tokens
    let one = MoeConfig::swiglu(1, 8, 4, 8, 3);
    matches_single_rank(&given_case(one, array![[7, 0, 3]], 2), 8);
    // every slot -1: nothing travels, the outputs and gradients are zeros
    let none = Array2::from_elem((6, 2), -1);
    matches_single_rank(&given_case(cfg.clone(), none, 3), 2);
    // no tokens at all
    matches_single_rank(&given_case(MoeConfig::swiglu(0, 8, 4, 8, 2), Array2::zeros((0, 2)), 4), 4);
}

#[test]
fn counts_and_bytes_of_a_worked_case() {
    // T 4 over 2 ranks (tokens 0-1 on rank 0, 2-3 on rank 1), E 4 (experts 0-1 on rank 0, 2-3 on rank 1), k 2
    let ids = array![[0, 2], [1, -1], [3, 2], [0, 3]];
    let rows = RowMap::build(ids.view(), 4);
    let plan = EpPlan::new(&rows, 2).unwrap();
    assert_eq!((plan.token_block(0), plan.token_block(1)), (0..2, 2..4));
    // rank 0's tokens send (0,0)->e0, (0,1)->e2, (1,0)->e1: 2 rows to itself, 1 to rank 1;
    // rank 1's tokens send (2,0)->e3, (2,1)->e2, (3,0)->e0, (3,1)->e3: 1 row to rank 0, 3 to itself
    assert_eq!(plan.counts(), vec![vec![2, 1], vec![1, 3]]);
    let tr = plan.traffic(4096, 2);
    assert_eq!(tr.dispatch_fwd, vec![vec![2 * 8192, 8192], vec![8192, 3 * 8192]]);
    assert_eq!(tr.combine_fwd, vec![vec![2 * 8192, 8192], vec![8192, 3 * 8192]]);
    assert_eq!(tr.dispatch_bwd, tr.dispatch_fwd);
    assert_eq!(tr.combine_bwd[0][1], 8192, "rank 0's expert rows for rank 1's token (3, 0) go back to rank 1");
    assert_eq!(tr.off_rank_total(), 4 * 2 * 8192);
    // rank 1's receive buffer holds experts 2 and 3 in expert-major order: (0,1) from rank 0, then (2,1), (2,0), (3,1)
    assert_eq!(plan.pair_rows(0, 1), vec![rows.slot_row[1].unwrap()]);
    assert_eq!(plan.layout.ranks[1].rows.len(), 4);
    // the first T % R ranks own one token more
    let odd = EpPlan::new(&RowMap::build(Array2::<i32>::zeros((5, 1)).view(), 4), 4).unwrap();
    assert_eq!((0..4).map(|s| odd.token_block(s)).collect::<Vec<_>>(), vec![0..2, 2..3, 3..4, 4..5]);
}

#[test]
fn ranks_that_do_not_split_the_experts_are_an_error() {
    let rows = RowMap::build(array![[0, 1]].view(), 6);
    assert!(EpPlan::new(&rows, 4).unwrap_err().contains("ep_ranks 4"));
    assert!(EpPlan::new(&rows, 0).is_err());
    assert!(EpPlan::new(&rows, 3).is_ok());
}
