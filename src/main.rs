fn main() {
    std::process::exit(moe_oracle::cli::main_with_args(std::env::args_os()));
}
