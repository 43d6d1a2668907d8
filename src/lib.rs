//! `moe-oracle`: case files, the command-line tools, and (later) checking and diagnosis.
