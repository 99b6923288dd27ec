//! The `corpora/` folder: its case files, and the cargo-fuzz seed corpora built from them.

use crate::case::Case;
use anyhow::{Context, Result};
use delegate::program::Step;
use delegate::LoweringMode;
use std::path::{Path, PathBuf};

/// The `corpora/` folder under the current directory.
pub fn corpora_dir() -> PathBuf {
    PathBuf::from("corpora")
}

/// Every case file under `corpora/seeds` and `corpora/regressions`, sorted.
pub fn corpus_files(corpora: &Path) -> Result<Vec<PathBuf>> {
    let mut files = vec![];
    for sub in ["seeds", "regressions"] {
        let dir = corpora.join(sub);
        if !dir.is_dir() {
            continue;
        }
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
                let p = e?.path();
                if p.is_dir() {
                    // Not `.in-flight/` (see `inflight`): the fuzz job's own working files.
                    if !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
                        stack.push(p);
                    }
                } else if p.extension().is_some_and(|x| x == "json" || x == "jsonl") {
                    files.push(p);
                }
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Writes cargo-fuzz seed corpora built from `corpora/`: every case as JSON for
/// `differential` and `roundtrip` (their targets read a JSON case when the input is one),
/// and every payload of every mode's lowering for `load_bytes`.
pub fn export_fuzz_corpus(corpora: &Path, out: &Path) -> Result<usize> {
    let mut written = 0;
    for t in ["differential", "roundtrip", "load_bytes"] {
        std::fs::create_dir_all(out.join(t))?;
    }
    for f in corpus_files(corpora)? {
        for case in Case::read_file(&f)? {
            let json = case.to_json();
            for t in ["differential", "roundtrip"] {
                std::fs::write(out.join(t).join(format!("case-{}", case.hash())), &json)?;
                written += 1;
            }
            let Ok(built) = crate::patterns::build(&case) else { continue };
            for mode in LoweringMode::ALL {
                let Ok(p) = crate::engine::lower(&built.graph, mode) else { continue };
                for (k, step) in p.steps.iter().enumerate() {
                    if let Step::Delegate(seg) = step {
                        let bytes = crate::engine::write(&seg.graph).unwrap_or_default();
                        let name = format!("payload-{}-{}-{k}", case.hash(), mode.name());
                        std::fs::write(out.join("load_bytes").join(name), bytes)?;
                        written += 1;
                    }
                }
            }
        }
    }
    Ok(written)
}
