//! Why a command failed, with which exit code; and reading an input file, whose
//! failure names the file.

use std::path::Path;

/// Why the command failed, and with which exit code.
pub(crate) enum Failure {
    /// Input read but invalid: one line per problem, exit 1.
    Invalid(Vec<String>),
    /// Input unusable: one line, exit 2.
    Unusable(String),
}

/// The text of an input file, or why it cannot be read (naming it).
pub(crate) fn read(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path)
        .map_err(|e| Failure::Unusable(format!("{}: cannot read: {e}", path.display())))
}
