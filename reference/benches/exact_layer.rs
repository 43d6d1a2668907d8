//! The oracle's speed target: qwen3-30b-a3b (H 2048, I 768, E 128, k 8, softmax top-k renormalised),
//! forward + backward in exact mode, bf16-valued inputs, next to the floor of plain f64 GEMMs of the same
//! FLOPs on this machine.
//!
//!     cargo bench -p moe-reference --bench exact_layer                 # 1024 tokens
//!     cargo bench -p moe-reference --bench exact_layer -- --tokens 256 [--engine certified|ozaki|reference] [--exact-checksum]
//!     cargo bench -p moe-reference --bench exact_layer -- --recipes bf16,fp8-block,mxfp8 [--skip-floor] [--checksum] [--exact-last | --no-exact] [--deviations]
//!
//! With `--recipes`, each emulated recipe (forward + backward + every bound) is timed too, with its ratio
//! to the exact run (the target: within 2x): as `moe-oracle run --recipe R` computes it, or with
//! `--deviations` as `moe-oracle check` does (also the deviation bounds). `--checksum` prints a hash of every emulated tensor, bound
//! and deviation, so that a speed change can be shown bit-identical at this shape (the golden cases are
//! far smaller). `--no-exact` times the recipes alone (no exact run in the process): with a run of the
//! exact mode alone (`--skip-floor` without `--recipes`), each mode on fresh memory, as one command runs.
//!
//! `--repeat N` runs the exact mode N times in the process and prints the later runs too (the first is
//! the reported time): the later ones reuse the memory the previous run freed, backed already.
//!
//! `--plain-layer` runs, instead of the exact mode, the layer's data flow with plain (inexact) f64 GEMMs and
//! every output kept in fresh memory as the layer keeps it (without the router's and the top-k weights'
//! gradients, under 2% of the exact run), next to the square floor: what an ordinary f64 implementation
//! costs on this machine, memory included.
//!
//! Prints the exact time, two floors (the same per-expert GEMM shapes in plain f64, and one square GEMM of
//! the same FLOPs) and the ratios; and the per-stage split of the exact run.

use std::time::Instant;

use moe_reference::config::{MoeConfig, Routing};
use moe_reference::gemm::Engine;
use moe_reference::layer::{self, LayerInputs, Options};
use ndarray::{Array2, Array3, ArrayView2, ArrayViewMut2};

struct Gen(u64);
impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    fn normal(&mut self) -> f64 {
        let u = ((self.next() >> 11) as f64 / (1u64 << 53) as f64).max(1e-300);
        let v = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
    fn bf16(&mut self, scale: f64) -> f64 {
        let b = ((self.normal() * scale) as f32).to_bits();
        f32::from_bits(b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000) as f64
    }
}

fn plain_gemm(m: usize, n: usize, k: usize, a: &[f64], b: &[f64], c: &mut [f64]) {
    unsafe {
        gemm::gemm(
            m, n, k, c.as_mut_ptr(), 1, n as isize, false, a.as_ptr(), 1, k as isize, b.as_ptr(), k as isize, 1, 0.0,
            1.0, false, false, false, gemm::Parallelism::Rayon(0),
        );
    }
}

/// `c = a · b` in plain (inexact) f64 with the `gemm` crate on every thread, any strides.
fn plain_into(a: ArrayView2<f64>, b: ArrayView2<f64>, mut c: ArrayViewMut2<f64>) {
    let ((m, k), n) = (a.dim(), b.ncols());
    assert!(b.nrows() == k && c.dim() == (m, n));
    let (sa, sb, sc) = (a.strides().to_vec(), b.strides().to_vec(), c.strides().to_vec());
    // SAFETY: the pointers and strides are those of the three views, whose shapes agree (asserted).
    unsafe {
        gemm::gemm(
            m, n, k, c.as_mut_ptr(), sc[1], sc[0], false, a.as_ptr(), sa[1], sa[0], b.as_ptr(), sb[1], sb[0], 0.0, 1.0,
            false, false, false, gemm::Parallelism::Rayon(0),
        );
    }
}

/// The layer's data flow with plain f64 GEMMs (`--plain-layer`): the same routing, row order and per-expert
/// shapes, every intermediate and gradient kept in arrays allocated as the layer allocates them (fresh
/// memory, first touched by the GEMM that writes it). Not exact, and not a check of anything: the time of
/// an ordinary f64 implementation of this layer on this machine, memory included, that the exact run's
/// time can be set against. Returns (forward, backward) seconds.
fn plain_layer(inp: &LayerInputs, dy: ArrayView2<f64>) -> (f64, f64) {
    use moe_reference::bigmem::zeros;
    use ndarray::{s, Axis};
    let cfg = &inp.cfg;
    let (hd, id, en, k) = (cfg.hidden, cfg.intermediate, cfg.experts, cfg.top_k);
    let t0 = Instant::now();
    let mut lap_t = Instant::now();
    let mut lap = |what: &str| {
        if std::env::var_os("MOE_ORACLE_TIMING").is_some() {
            eprintln!("[plain] {what:<24} {:.3} s", lap_t.elapsed().as_secs_f64());
        }
        lap_t = Instant::now();
    };
    let rw = inp.router_weight.as_ref().expect("the bench routes");
    let mut logits = zeros((cfg.tokens, en));
    plain_into(inp.x.view(), rw.t(), logits.view_mut());
    let routed = moe_reference::route::forward(cfg.routing.as_ref().expect("routing"), k, logits.view(), None);
    let rows = moe_reference::dispatch::RowMap::build(routed.topk_ids.view(), en);
    let xr = rows.gather(inp.x.view());
    let m = rows.rows();
    lap("route, gather");
    let per_expert = |width: usize, f: &dyn Fn(usize, ArrayViewMut2<f64>)| {
        let mut out = zeros((m, width));
        for e in 0..en {
            f(e, out.slice_mut(s![rows.expert_rows(e), ..]));
        }
        out
    };
    let h = per_expert(2 * id, &|e, o| plain_into(xr.slice(s![rows.expert_rows(e), ..]), inp.w13.index_axis(Axis(0), e).t(), o));
    lap("fwd.h");
    let mut a = zeros((m, id));
    for (mut ar, hr) in a.axis_iter_mut(Axis(0)).zip(h.axis_iter(Axis(0))) {
        for c in 0..id {
            ar[c] = hr[c] / (1.0 + (-hr[c]).exp()) * hr[id + c];
        }
    }
    lap("swiglu");
    let o = per_expert(hd, &|e, out| plain_into(a.slice(s![rows.expert_rows(e), ..]), inp.w2.index_axis(Axis(0), e).t(), out));
    lap("fwd.o");
    let y = rows.combine(o.view(), routed.topk_weights.view());
    lap("combine");
    let t_fwd = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let do_ = rows.dispatch_weighted(dy, routed.topk_weights.view());
    let da = per_expert(id, &|e, out| plain_into(do_.slice(s![rows.expert_rows(e), ..]), inp.w2.index_axis(Axis(0), e), out));
    lap("dispatch, da");
    let mut dh = zeros((m, 2 * id));
    for ((mut d, hr), dar) in dh.axis_iter_mut(Axis(0)).zip(h.axis_iter(Axis(0))).zip(da.axis_iter(Axis(0))) {
        for c in 0..id {
            let sg = 1.0 / (1.0 + (-hr[c]).exp());
            d[c] = dar[c] * hr[id + c] * sg * (1.0 + hr[c] * (1.0 - sg));
            d[id + c] = dar[c] * hr[c] * sg;
        }
    }
    lap("swiglu backward");
    let mut gw2 = zeros((en, hd, id));
    let mut gw13 = zeros((en, 2 * id, hd));
    for e in 0..en {
        let r = rows.expert_rows(e);
        plain_into(do_.slice(s![r.clone(), ..]).t(), a.slice(s![r.clone(), ..]), gw2.index_axis_mut(Axis(0), e));
        plain_into(dh.slice(s![r.clone(), ..]).t(), xr.slice(s![r, ..]), gw13.index_axis_mut(Axis(0), e));
    }
    lap("grad.w2, grad.w13");
    let dx_rows = per_expert(hd, &|e, out| plain_into(dh.slice(s![rows.expert_rows(e), ..]), inp.w13.index_axis(Axis(0), e), out));
    lap("dx_rows");
    let mut gx = zeros((cfg.tokens, hd));
    for (r, &t) in rows.row_token.iter().enumerate() {
        let mut g = gx.row_mut(t);
        g += &dx_rows.row(r);
    }
    lap("grad.x");
    std::hint::black_box((&y, &gw2, &gw13, &gx));
    (t_fwd, t1.elapsed().as_secs_f64())
}

/// Floor 2: one square f64 GEMM of `flops` (side n, seconds).
fn square_floor(flops: f64) -> (usize, f64) {
    let n = ((flops / 2.0).cbrt()) as usize;
    let a = vec![1.0f64; n * n];
    let b = vec![1.0f64; n * n];
    let mut c = vec![0.0f64; n * n];
    let t = Instant::now();
    plain_gemm(n, n, n, &a, &b, &mut c);
    (n, t.elapsed().as_secs_f64())
}

/// The same allocator as the `moe-oracle` binary (see its `main.rs`), so the times are what users see.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An FNV-style hash over the bits of every element, in standard order (rotated so that every bit of
/// every element reaches every bit of the hash).
fn hash_bits(bits: impl Iterator<Item = u64>) -> u64 {
    bits.fold(0xcbf29ce484222325u64, |h, b| (h ^ b).wrapping_mul(0x100000001b3).rotate_left(23))
}

fn print_checksums(em: &moe_reference::emulate::Emulated) {
    for (name, b) in &em.bounds {
        let v = layer::named_tensor(&em.fwd, em.bwd.as_ref(), name).map(|v| hash_bits(v.iter().map(|x| x.to_bits())));
        let hb = hash_bits(b.iter().map(|x| u64::from(x.to_bits())));
        let hd = em.deviation(name).map(|d| hash_bits(d.iter().map(|x| u64::from(x.to_bits()))));
        println!("  checksum {name:<20} value {:016x}  bound {hb:016x}  deviation {:016x}", v.unwrap_or(0), hd.unwrap_or(0));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let tokens = args
        .iter()
        .position(|a| a == "--tokens")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024usize);
    let (h, i, e, k) = (2048usize, 768usize, 128usize, 8usize);
    let cfg = MoeConfig { routing: Some(Routing::softmax()), ..MoeConfig::swiglu(tokens, h, i, e, k) };
    let mut g = Gen(0x5eed);
    let x = Array2::from_shape_fn((tokens, h), |_| g.bf16(1.0));
    let w13 = Array3::from_shape_fn((e, 2 * i, h), |_| g.bf16(0.02));
    let w2 = Array3::from_shape_fn((e, h, i), |_| g.bf16(0.02));
    let rw = Array2::from_shape_fn((e, h), |_| g.bf16(0.02));
    let dy = Array2::from_shape_fn((tokens, h), |_| g.bf16(0.01));
    let inp = LayerInputs {
        cfg,
        x,
        w13,
        w2,
        topk_ids: None,
        topk_weights: None,
        router_weight: Some(rw),
        router_bias: None,
        dy: Some(dy.clone()),
    };
    let recipes: Vec<String> = args
        .iter()
        .position(|a| a == "--recipes")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').map(String::from).collect())
        .unwrap_or_default();
    let skip_floor = args.iter().any(|a| a == "--skip-floor");
    // Without `--deviations` the recipes run as `moe-oracle run --recipe R` runs them (values and bounds);
    // with it, as `moe-oracle check` runs them (also the deviation bounds it tightens its checks with).
    let deviations = args.iter().any(|a| a == "--deviations");
    let threads = rayon::current_num_threads();
    eprintln!("qwen3-30b-a3b layer, {tokens} tokens, exact mode, {threads} threads");

    // `--engine certified|ozaki|reference`: the exact GEMM engine (all give the same bits; `--exact-checksum`
    // prints a hash of y and of every gradient to show it at this shape).
    let engine = match args.iter().position(|a| a == "--engine").and_then(|i| args.get(i + 1)).map(String::as_str) {
        None | Some("certified") => Engine::Certified,
        Some("ozaki") => Engine::Ozaki,
        Some("reference") => Engine::Reference,
        Some(other) => panic!("unknown engine {other} (certified, ozaki, reference)"),
    };
    let opt = Options { engine };
    eprintln!("exact GEMM engine {engine:?}");
    let exact_checksum = args.iter().any(|a| a == "--exact-checksum");
    let layer_flops = |m: usize| 2.0 * (m as f64) * (3 * h * i) as f64 * 3.0 + 3.0 * 2.0 * (tokens * h * e) as f64;

    if args.iter().any(|a| a == "--plain-layer") {
        // Instead of the exact run, in its own process so that it too starts on fresh memory.
        let (t_fwd, t_bwd) = plain_layer(&inp, dy.view());
        let plain = t_fwd + t_bwd;
        let (n, floor_square) = square_floor(layer_flops(tokens * k));
        println!("plain f64 layer: forward {t_fwd:.2} s, backward {t_bwd:.2} s, fwd+bwd {plain:.2} s (not exact; fresh memory)");
        println!("floor: square {n}^3 {floor_square:8.2} s   ratio {:.2}x", plain / floor_square);
        return;
    }

    // The exact run, timed: (forward s, backward s, dispatched rows, rows per expert).
    let run_exact = || {
        let t0 = Instant::now();
        let fwd = layer::forward(&inp, opt);
        let t_fwd = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let bwd = layer::backward(&inp, &fwd, dy.view(), opt);
        let t_bwd = t1.elapsed().as_secs_f64();
        std::hint::black_box(&bwd);
        if exact_checksum {
            let h = |a: ndarray::ArrayViewD<f64>| hash_bits(a.iter().map(|x| x.to_bits()));
            let mut tensors = vec![("y", h(fwd.y.view().into_dyn())), ("grad.x", h(bwd.grad_x.view().into_dyn()))];
            tensors.push(("grad.w13", h(bwd.grad_w13.view().into_dyn())));
            tensors.push(("grad.w2", h(bwd.grad_w2.view().into_dyn())));
            tensors.push(("grad.topk_weights", h(bwd.grad_topk_weights.view().into_dyn())));
            if let Some(g) = &bwd.grad_router_weight {
                tensors.push(("grad.router.weight", h(g.view().into_dyn())));
            }
            for (name, v) in tensors {
                println!("  exact checksum {name:<20} {v:016x}");
            }
        }
        let expert_rows: Vec<usize> = (0..e).map(|ex| fwd.rows.expert_rows(ex).len()).collect();
        (t_fwd, t_bwd, fwd.rows.rows(), expert_rows) // fwd and bwd dropped here
    };
    // `--exact-last` runs the recipes first, as `moe-oracle run --recipe R --compare-exact` does: each mode
    // takes memory the process has freed before it, if any, faster than fresh memory (BENCHMARKS.md), so
    // the default order favours the recipes and this one the exact run; the two bracket a run of either
    // alone.
    let exact_last = args.iter().any(|a| a == "--exact-last") || args.iter().any(|a| a == "--no-exact");
    let exact_first = (!exact_last).then(&run_exact);
    let mut emulated = Vec::new();
    for r in &recipes {
        let recipe = moe_reference::recipe::Recipe::named(r).unwrap_or_else(|| panic!("unknown recipe {r}"));
        let t = Instant::now();
        let opts = moe_reference::emulate::EmulateOptions { keep_quantised: false, same_schedule: false, deviations };
        let em = moe_reference::emulate::run_opts(&inp, &recipe, Options::default(), opts).expect("named recipe");
        let te = t.elapsed().as_secs_f64();
        std::hint::black_box(&em.bounds);
        if args.iter().any(|a| a == "--checksum") {
            print_checksums(&em);
        }
        emulated.push((r, te));
    }
    if args.iter().any(|a| a == "--no-exact") {
        // Each recipe alone in its process, on fresh memory as a single `moe-oracle run --recipe` is: compare
        // with a run of the exact mode alone (the same command without `--recipes`).
        for (r, te) in emulated {
            println!("emulated {r:<13} {te:8.2} s   (no exact run in this process)");
        }
        return;
    }
    let (t_fwd, t_bwd, m, expert_rows) = exact_first.unwrap_or_else(run_exact);
    let exact = t_fwd + t_bwd;
    // `--repeat N`: N - 1 more exact runs after the first (which alone is the reported time): the memory
    // the first run freed is taken again, backed already, as a process that checks several cases would.
    let repeat: usize = args.iter().position(|a| a == "--repeat").and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(1);
    for run in 2..=repeat {
        let (f, b, _, _) = run_exact();
        println!("exact fwd+bwd, run {run} (memory freed by run {} reused) {:8.2} s", run - 1, f + b);
    }
    for (r, te) in emulated {
        let what = if deviations { "with deviations, as check" } else { "values and bounds, as run --recipe" };
        println!("emulated {r:<13} {te:8.2} s   ratio to exact {:.2}x   ({what})", te / exact);
    }
    if skip_floor {
        println!("exact fwd+bwd        {exact:8.2} s");
        return;
    }

    // Floor 1: the same per-expert GEMM shapes in plain f64 (6 per expert, plus the router's 3).
    let flops = layer_flops(m);
    let t2 = Instant::now();
    for ex in 0..e {
        let me = expert_rows[ex];
        if me == 0 {
            continue;
        }
        let shapes = [(me, 2 * i, h), (me, h, i), (me, i, h), (h, i, me), (me, h, 2 * i), (2 * i, h, me)];
        for (mm, nn, kk) in shapes {
            let a = vec![1.0f64; mm * kk];
            let b = vec![1.0f64; nn * kk];
            let mut c = vec![0.0f64; mm * nn];
            plain_gemm(mm, nn, kk, &a, &b, &mut c);
            std::hint::black_box(&c);
        }
    }
    for (mm, nn, kk) in [(tokens, e, h), (tokens, h, e), (e, h, tokens)] {
        let a = vec![1.0f64; mm * kk];
        let b = vec![1.0f64; nn * kk];
        let mut c = vec![0.0f64; mm * nn];
        plain_gemm(mm, nn, kk, &a, &b, &mut c);
    }
    let floor_shapes = t2.elapsed().as_secs_f64();
    let (n, floor_square) = square_floor(flops);

    println!("tokens {tokens}  rows {m}  GFLOP {:.1}", flops / 1e9);
    println!("exact forward        {t_fwd:8.2} s");
    println!("exact backward       {t_bwd:8.2} s");
    println!("exact fwd+bwd        {exact:8.2} s   ({:.1} GFLOP/s effective)", flops / exact / 1e9);
    println!("floor: same shapes   {floor_shapes:8.2} s   ratio {:.2}x", exact / floor_shapes);
    println!("floor: square {n}^3 {floor_square:8.2} s   ratio {:.2}x", exact / floor_square);
}
