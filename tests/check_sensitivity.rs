//! How small an error `check` and `diagnose` can see: per recipe and tensor, the median over elements of
//! bound / |exact| (the relative error of one element that just reaches its bound), for the end-to-end
//! bound `check` uses and for the one-stage bound `diagnose` replays with. Printed as a table (run with
//! `--ignored --nocapture`); asserts only that replaying a stage never loosens its bound by much, which
//! is what makes localisation sharper than checking outputs.

mod common_mut;

use common_mut::*;
use moe_oracle::check::Context;
use moe_oracle::diagnose::replay::Replay;
use moe_oracle::diagnose::STAGES;
use moe_reference::recipe::NAMED;

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore]
fn relative_detection_thresholds_per_recipe() {
    let dir = tempfile::tempdir().unwrap();
    println!("| recipe | tensor | check: median bound/|exact| | diagnose (stage replay): median bound/|exact| |");
    println!("|---|---|---|---|");
    for recipe in NAMED {
        let c = cfg(64, 256, 128, 8, 2, recipe);
        let inp = inputs(&c, 3);
        let b = base(&inp);
        let case = write_case(dir.path(), recipe, &inp);
        let cand = write_candidate(dir.path(), recipe, &c, &b.tensors, None, moe_oracle::case::FloatDtype::F32);
        let ctx = Context::load(&case, &cand, None).unwrap();
        let rp = Replay::new(&ctx).unwrap();
        for name in STAGES {
            let (Some(ex), Some(bd), Some(st)) = (ctx.exact(name), ctx.em.bound(name), rp.stage(name)) else { continue };
            let rel = |b: &ndarray::ArrayD<f64>, x: &ndarray::ArrayD<f64>| {
                median(b.iter().zip(x.iter()).filter(|(_, &x)| x != 0.0).map(|(&b, &x)| b / x.abs()).collect())
            };
            let whole = rel(&bd.mapv(f64::from), &ex.to_owned());
            let stage = rel(&st.bound, &st.exact);
            println!("| {recipe} | {name} | {whole:.2e} | {stage:.2e} |");
            assert!(stage <= 2.0 * whole, "{recipe} {name}: replay bound {stage} vs end-to-end {whole}");
        }
    }
}
