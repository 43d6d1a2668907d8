//! placeholder
use std::path::PathBuf;
use clap::Args;
use crate::cli::CliError;

#[derive(Debug, Args)]
pub struct DiagnoseArgs {
    pub case: PathBuf,
    #[arg(long)]
    pub candidate: PathBuf,
}

pub fn run(_args: &DiagnoseArgs) -> Result<(), CliError> {
    Ok(())
}
