//! See `nodewright_core::testing::fuzz_claim`; `shared/core/tests/fuzz_corpus.rs` replays
//! the corpus through the same function on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    nodewright_core::testing::fuzz_claim(data);
});
