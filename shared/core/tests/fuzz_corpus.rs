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

use nodewright_core::testing::{
    fuzz_catalog, fuzz_claim, fuzz_event, fuzz_manifests_with, fuzz_snapshot_with,
};

/// Planning takes ~30 ms per input in a debug build, so of the committed corpus only
/// every `PLAN_EVERY`-th file is planned (all are parsed); seeds and regressions are
/// always planned. `NODEWRIGHT_FUZZ_PLAN_ALL=1` plans every file.
const PLAN_EVERY: usize = 8;

/// The committed corpora hold hundreds of inputs each; fewer than this means the
/// directory moved or was emptied, and the replay would pass having tested nothing.
const MIN_CORPUS: usize = 50;

/// A fuzz target: its corpus directory, and the function that replays one input
/// (planning only when asked).
type Target = (&'static str, fn(&[u8], bool));

const TARGETS: [Target; 5] = [
    ("manifests", fuzz_manifests_with),
    ("snapshot", fuzz_snapshot_with),
    ("catalog", |d, _| fuzz_catalog(d)),
    ("event", |d, _| fuzz_event(d)),
    ("claim", |d, _| fuzz_claim(d)),
];

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["fuzz/corpus", "fuzz/seeds", "tests/fuzz-regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("readable directory").path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    let corpus = files
        .iter()
        .filter(|p| p.starts_with(root.join("fuzz/corpus")))
        .count();
    assert!(
        corpus >= MIN_CORPUS,
        "{target}: {corpus} inputs in fuzz/corpus/{target}/, expected at least {MIN_CORPUS} \
         (did the corpus move? this replay must not pass with nothing to replay)"
    );
    files
}

fn replay(target: &str, run: fn(&[u8], bool)) {
    let files = inputs(target);
    let plan_all = std::env::var_os("NODEWRIGHT_FUZZ_PLAN_ALL").is_some_and(|v| v == "1");
    let mut failed = Vec::new();
    for (i, path) in files.iter().enumerate() {
        let data = std::fs::read(path).expect("readable input");
        let in_corpus = path.components().any(|c| c.as_os_str() == "corpus");
        let plan = plan_all || !in_corpus || i % PLAN_EVERY == 0;
        if std::panic::catch_unwind(|| run(&data, plan)).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} of {} inputs panicked: {failed:#?}",
        failed.len(),
        files.len()
    );
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

#[test]
fn event_corpus_and_regressions_replay_cleanly() {
    replay(TARGETS[3].0, TARGETS[3].1);
}

#[test]
fn claim_corpus_and_regressions_replay_cleanly() {
    replay(TARGETS[4].0, TARGETS[4].1);
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
    for entry in std::fs::read_dir(root.join("claim")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        serde_json::from_str::<nodewright_core::nodeclaim::NodeClaim>(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}
