//! The curated golden set committed under `golden/`: which cases, with which arguments, and what each one
//! covers (recipes, routings, activations, and the bug classes of `anchors.md`); and `golden/MANIFEST.json`.
//!
//! Regenerate the files and the manifest (after a deliberate change of the generator, with [`GENERATOR`]
//! bumped) with
//!
//! ```text
//! cargo test --release --test golden_manifest -- --ignored regenerate_golden_set
//! ```
//!
//! `tests/golden_manifest.rs` regenerates every case in memory and compares checksums.

use std::path::Path;

use clap::Parser;
use sha2::{Digest, Sha256};

use super::{GoldenArgs, GENERATOR};

/// One curated case.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// File name under `golden/`.
    pub file: &'static str,
    /// `moe-oracle golden` arguments (without `-o`).
    pub args: &'static str,
    /// What the case is there for.
    pub covers: &'static str,
}

/// Small shapes (H=32, I=16, at most 16 experts) keep the whole set a few MB and its test fast.
macro_rules! small {
    ($rest:literal) => {
        concat!("--hidden 32 --intermediate 16 ", $rest)
    };
}

/// The curated set.
pub const CASES: &[Entry] = &[
    Entry {
        file: "qwen3-30b-a3b_bf16.safetensors",
        args: small!("--preset qwen3-30b-a3b --experts 16 --recipe bf16"),
        covers: "recipe bf16; softmax renormalised; swiglu; skewed load, fewer than 64 rows per expert",
    },
    Entry {
        file: "qwen3-235b-a22b_fp32_intermediates.safetensors",
        args: small!("--preset qwen3-235b-a22b --experts 16 --tokens 16 --recipe fp32 --intermediates"),
        covers: "recipe fp32 (F32 storage); intermediates fwd.*/bwd.*",
    },
    Entry {
        file: "deepseek-v3_fp8-block.safetensors",
        args: small!("--preset deepseek-v3 --experts 16 --recipe fp8-block"),
        covers: "recipe fp8-block; sigmoid + selection bias + groups (8 keep 4), scaling 2.5",
    },
    Entry {
        file: "mixtral-8x7b_fp8-block-te.safetensors",
        args: small!("--preset mixtral-8x7b --recipe fp8-block-te"),
        covers: "recipe fp8-block-te; softmax over the top-2 (renormalised), 8 experts",
    },
    Entry {
        file: "olmoe-1b-7b_mxfp8.safetensors",
        args: small!("--preset olmoe-1b-7b --experts 16 --recipe mxfp8"),
        covers: "recipe mxfp8; softmax not renormalised",
    },
    Entry {
        file: "gpt-oss-120b_fp8-bwd.safetensors",
        args: small!("--preset gpt-oss-120b --experts 16 --recipe fp8-bwd"),
        covers: "recipe fp8-bwd; clamped SwiGLU (alpha 1.702, limit 7)",
    },
    Entry {
        file: "qwen3-30b-a3b_given-routing.safetensors",
        args: small!("--preset qwen3-30b-a3b --experts 16 --given-routing"),
        covers: "given top-k (topk_ids/topk_weights, routing null)",
    },
    Entry {
        file: "gpt-oss-120b_given-routing_intermediates.safetensors",
        args: small!("--preset gpt-oss-120b --experts 16 --tokens 16 --given-routing --intermediates"),
        covers: "given top-k with clamped SwiGLU; intermediates",
    },
    Entry {
        file: "qwen3-30b-a3b_one-expert.safetensors",
        args: small!("--preset qwen3-30b-a3b --experts 8 --top-k 1 --scenario one-expert"),
        covers: "one expert with every token (k=1: every other expert empty)",
    },
    Entry {
        file: "olmoe-1b-7b_empty-experts.safetensors",
        args: small!("--preset olmoe-1b-7b --experts 16 --scenario empty-experts"),
        covers: "empty experts (8 of 16 never chosen: their weight gradients must be exactly zero)",
    },
    Entry {
        file: "mixtral-8x7b_zero-channel-128_fp8-block.safetensors",
        args: small!("--preset mixtral-8x7b --tokens 160 --recipe fp8-block --scenario zero-channel-128"),
        covers: "exactly 128 tokens on expert 0 with an all-zero channel of x (FP8 wgrad block with amax 0)",
    },
    Entry {
        file: "qwen3-30b-a3b_unused-slots.safetensors",
        args: small!("--preset qwen3-30b-a3b --experts 16 --scenario unused-slots"),
        covers: "-1 slots (a third of them, all of token 0's), non-zero weights on them",
    },
    Entry {
        file: "qwen3-30b-a3b_router-ties.safetensors",
        args: small!("--preset qwen3-30b-a3b --experts 16 --scenario router-ties"),
        covers: "ties in the router (identical router rows in pairs; token 0 all zero: every logit ties)",
    },
    Entry {
        file: "deepseek-v3_router-ties.safetensors",
        args: small!("--preset deepseek-v3 --experts 16 --scenario router-ties"),
        covers: "ties in grouped sigmoid routing with bias",
    },
    Entry {
        file: "mixtral-8x7b_k-equals-e.safetensors",
        args: small!("--preset mixtral-8x7b --experts 4 --top-k 4"),
        covers: "k = E (every token on every expert)",
    },
    Entry {
        file: "qwen3-30b-a3b_t1.safetensors",
        args: small!("--preset qwen3-30b-a3b --experts 16 --tokens 1"),
        covers: "T = 1",
    },
    Entry {
        file: "qwen3-30b-a3b_large-magnitude.safetensors",
        args: small!("--preset qwen3-30b-a3b --experts 16 --scenario large-magnitude"),
        covers: "large magnitudes (x ~ 2^40, dy ~ 2^20)",
    },
    Entry {
        file: "qwen3-235b-a22b_tiny-magnitude_fp32.safetensors",
        args: small!("--preset qwen3-235b-a22b --experts 16 --recipe fp32 --scenario tiny-magnitude"),
        covers: "tiny magnitudes (x ~ 2^-40, dy ~ 2^-30), F32 storage",
    },
    Entry {
        file: "deepseek-v3_ep4.safetensors",
        args: small!("--preset deepseek-v3 --experts 16 --ep-ranks 4"),
        covers: "ep_ranks = 4 (results must equal the single-rank ones: no double counting)",
    },
    Entry {
        file: "qwen3-30b-a3b_ep2_given-routing.safetensors",
        args: small!("--preset qwen3-30b-a3b --experts 16 --ep-ranks 2 --tokens 16 --given-routing --intermediates"),
        covers: "ep_ranks = 2 with given routing; intermediates",
    },
];

/// Parse an entry's arguments (as `moe-oracle golden ARGS -o output`).
pub fn parse_args(args: &str, output: &Path) -> Result<GoldenArgs, clap::Error> {
    #[derive(Parser)]
    struct One {
        #[command(flatten)]
        args: GoldenArgs,
    }
    let mut argv: Vec<String> = vec!["golden".into()];
    argv.extend(args.split_whitespace().map(String::from));
    argv.push("-o".into());
    argv.push(output.display().to_string());
    One::try_parse_from(argv).map(|o| o.args)
}

/// Lower-case hex SHA-256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Write every curated case into `dir` and `dir/MANIFEST.json`; returns the manifest.
pub fn regenerate(dir: &Path) -> Result<serde_json::Value, String> {
    let mut cases = Vec::new();
    for entry in CASES {
        let path = dir.join(entry.file);
        let args = parse_args(entry.args, &path).map_err(|e| format!("{}: {e}", entry.file))?;
        let g = super::write_golden(&args).map_err(|e| format!("{}: {e}", entry.file))?;
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let config: serde_json::Value =
            serde_json::from_str(&g.metadata[crate::case::KEY_CONFIG]).expect("the writer's own JSON");
        cases.push(serde_json::json!({
            "file": entry.file,
            "args": args.canonical(&args.config().map_err(|e| e.to_string())?),
            "seed": args.seed,
            "config": config,
            "covers": entry.covers,
            "bytes": bytes.len(),
            "sha256": sha256_hex(&bytes),
        }));
    }
    let manifest = serde_json::json!({
        "generator": GENERATOR,
        "regenerate": "cargo test --release --test golden_manifest -- --ignored regenerate_golden_set",
        "cases": cases,
    });
    let text = serde_json::to_string_pretty(&manifest).expect("JSON") + "\n";
    std::fs::write(dir.join("MANIFEST.json"), text).map_err(|e| format!("MANIFEST.json: {e}"))?;
    Ok(manifest)
}
