//! Replays the fuzz corpora and the fuzz regression inputs through the same functions the
//! cargo-fuzz targets call (`nodewright_core::testing::fuzz_*`), on stable, in plain
//! `cargo test`. Every input must be handled without a panic; for inputs that parse, the
//! plan must pass the independent constraint checker.
//!
//! Directories, relative to this crate:
//! - `fuzz/corpus/<target>/`: the committed, minimized libFuzzer corpus;
//! - `fuzz/seeds/<target>/`: hand-written seeds;
//! - `tests/fuzz-regressions/<target>/`: inputs that once crashed a target.

use std::path::{Path, PathBuf};

use nodewright_core::testing::{fuzz_catalog, fuzz_manifests, fuzz_snapshot};

const TARGETS: [(&str, fn(&[u8])); 3] =
    [("manifests", fuzz_manifests), ("snapshot", fuzz_snapshot), ("catalog", fuzz_catalog)];

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["fuzz/corpus", "fuzz/seeds", "tests/fuzz-regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else { continue };
        for entry in entries {
            let path = entry.expect("readable directory").path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn replay(target: &str, run: fn(&[u8])) {
    let files = inputs(target);
    let mut failed = Vec::new();
    for path in &files {
        let data = std::fs::read(path).expect("readable input");
        if std::panic::catch_unwind(|| run(&data)).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(failed.is_empty(), "{target}: {} of {} inputs panicked: {failed:#?}", failed.len(), files.len());
}

#[test]
fn manifests_corpus_and_regressions_replay_cleanly() {
    replay(TARGETS[0].0, TARGETS[0].1);
}

#[test]
fn snapshot_corpus_and_regressions_replay_cleanly() {
    replay(TARGETS[1].0, TARGETS[1].1);
}

#[test]
fn catalog_corpus_and_regressions_replay_cleanly() {
    replay(TARGETS[2].0, TARGETS[2].1);
}

/// The seeds are meant to reach the planner: make sure they still parse, so a format
/// change does not silently turn them into inputs that stop at the parser.
#[test]
fn hand_written_seeds_parse() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    for entry in std::fs::read_dir(root.join("manifests")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let docs = nodewright_core::api::parse_documents("seed", &text).expect("seed parses");
        nodewright_core::api::validate(&docs).expect("seed validates");
    }
    for entry in std::fs::read_dir(root.join("snapshot")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        nodewright_core::snapshot::parse_snapshot(&text).expect("seed parses");
    }
    for entry in std::fs::read_dir(root.join("catalog")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        nodewright_core::catalog::Catalog::from_json(&text).expect("seed parses");
    }
}
