/// mimalloc keeps freed memory for a while and hands it out again, where glibc returns the large per-expert
/// temporaries of the emulator (tens of MB each) to the system and takes the page faults again: on the
/// development VM that made `run --recipe bf16` at qwen3-30b-a3b's shape 1.3x slower (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(moe_oracle::cli::main_with_args(std::env::args_os()));
}
