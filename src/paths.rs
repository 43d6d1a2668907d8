//! Output paths, checked before any work: each must be creatable, and none may name an input or another
//! output of the same command. Writes go through a temporary file and a rename, so without this check
//! `run CASE -o CASE` or `check CASE --candidate C --json C` would replace the very file they read.

use std::path::{Path, PathBuf};

use crate::cli::CliError;

/// Fail early (before any computation) when `path` cannot be created as a file.
pub fn check_output(path: &Path) -> Result<(), CliError> {
    let err = |why: String| Err(CliError::Output { path: path.to_path_buf(), why });
    if path.as_os_str().is_empty() {
        return err("empty path".into());
    }
    if path.is_dir() {
        return err("is a directory".into());
    }
    if !parent(path).is_dir() {
        return err(format!("directory {} does not exist", parent(path).display()));
    }
    Ok(())
}

/// [`check_output`] for every output, then refuse an output that names one of `inputs` or an earlier
/// output (symbolic links and `./` spellings resolved).
pub fn check_outputs(inputs: &[&Path], outputs: &[&Path]) -> Result<(), CliError> {
    for o in outputs {
        check_output(o)?;
    }
    let inputs: Vec<(PathBuf, &Path)> = inputs.iter().filter_map(|p| identity(p).map(|id| (id, *p))).collect();
    let mut seen: Vec<(PathBuf, &Path)> = Vec::new();
    for &o in outputs {
        let Some(id) = identity(o) else { continue };
        if let Some((_, i)) = inputs.iter().find(|(x, _)| *x == id) {
            let why = format!("is the input {} (it would be overwritten); write elsewhere", i.display());
            return Err(CliError::Output { path: o.to_path_buf(), why });
        }
        if let Some((_, p)) = seen.iter().find(|(x, _)| *x == id) {
            let why = format!("is also given as the output {}", p.display());
            return Err(CliError::Output { path: o.to_path_buf(), why });
        }
        seen.push((id, o));
    }
    Ok(())
}

/// The directory a file path lives in (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The canonical form of `path`, also for a file not yet created (its directory resolved, its name kept);
/// `None` when not even the directory resolves (then [`check_output`] or the read reports it).
fn identity(path: &Path) -> Option<PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Some(p);
    }
    Some(parent(path).canonicalize().ok()?.join(path.file_name()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_naming_an_input_or_another_output_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let case = dir.path().join("case.safetensors");
        std::fs::write(&case, b"x").unwrap();
        let other = dir.path().join("out.safetensors");
        let dotted = dir.path().join(".").join("case.safetensors");
        let e = check_outputs(&[&case], &[&dotted]).unwrap_err().to_string();
        assert!(e.contains("is the input") && e.contains("case.safetensors"), "{e}");
        #[cfg(unix)]
        {
            let link = dir.path().join("link.safetensors");
            std::os::unix::fs::symlink(&case, &link).unwrap();
            assert!(check_outputs(&[&case], &[&link]).is_err(), "a symbolic link to the input");
        }
        let e = check_outputs(&[&case], &[&other, &other]).unwrap_err().to_string();
        assert!(e.contains("also given as the output"), "{e}");
        // Distinct, not yet existing outputs beside an input are fine.
        check_outputs(&[&case], &[&other, &dir.path().join("report.json")]).unwrap();
    }
}
