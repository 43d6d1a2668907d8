//! `moe-oracle ep-plan`: the expert-parallel exchange table of a preset (no GPU, no case file); bad arguments
//! rejected with one line, exit 2 and nothing on stdout.


mod cli_common;
use cli_common::*;

#[test]
fn prints_the_rank_pairs_and_the_bytes_of_a_pass() {
    let o = oracle(&["ep-plan", "--preset", "qwen3-30b-a3b", "--tokens-per-rank", "512", "--ep-ranks", "4"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.starts_with("ep-plan qwen3-30b-a3b: T 2048 (512 per rank) over 4 ranks, E 128 (32 per rank), k 8, H 2048: 16384 rows"), "{out}");
    // the 4 x 4 row counts add up to every dispatched row
    let counts: usize = out
        .lines()
        .filter(|l| l.trim_start().starts_with("from "))
        .flat_map(|l| l.split_whitespace().skip(2).map(|n| n.parse::<usize>().unwrap()).collect::<Vec<_>>())
        .sum();
    assert_eq!(counts, 16384);
    assert!(out.contains("off-rank bytes of a forward+backward pass"), "{out}");
}

#[test]
fn bad_arguments_are_one_line_and_exit_2() {
    for (args, what) in [
        (vec!["--preset", "qwen3-30b-a3b", "--ep-ranks", "3"], "--ep-ranks 3"),
        (vec!["--preset", "qwen3-30b-a3b", "--ep-ranks", "0"], "--ep-ranks 0"),
        (vec!["--preset", "qwen3-30b-a3b", "--hot", "1.5"], "--hot 1.5"),
        (vec!["--preset", "qwen3-30b-a3b", "--tokens-per-rank", "100000000"], "at most"),
        (vec!["--preset", "qwen3-30b-a3b", "--elem-bytes", "0"], "--elem-bytes 0"),
    ] {
        let o = oracle(&[&["ep-plan"][..], &args].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(o.stdout.is_empty(), "{args:?}: partial output");
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(what), "{args:?}: {err}");
    }
}
