//! `-o/--output` as kubectl users know it: `table` (the default), `wide` (more
//! columns), `json` and `yaml` (the same document in either), and prices written for
//! people: dollars to 4 decimals, never `-0.0000`, never `0.20400000000000001`.

use std::io::Write as _;

use clap::ValueEnum;
use serde::Serialize;

use crate::failure::Failure;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub(crate) enum Output {
    /// Columns for people.
    Table,
    /// The table with more columns.
    Wide,
    Json,
    Yaml,
}

impl Output {
    /// `wide` is refused by a command with nothing more to show: exit 2, one line.
    pub(crate) fn refuse_wide(self, command: &str) -> Result<Self, Failure> {
        if self == Output::Wide {
            return Err(Failure::Unusable(format!(
                "{command}: -o wide has nothing more to show here; use -o table, -o json or -o yaml"
            )));
        }
        Ok(self)
    }
}

/// Every price and amount of money in output: rounded to 4 decimals (a tenth of a cent
/// per hour is finer than any price list), `-0` as `0`.
pub(crate) fn round4(value: f64) -> f64 {
    let rounded = (value * 10_000.0).round() / 10_000.0;
    if rounded == 0.0 { 0.0 } else { rounded }
}

/// `0.0768`, `0.0000` (never `-0.0000`): dollars for a table.
pub(crate) fn dollars(value: f64) -> String {
    format!("{:.4}", round4(value))
}

/// Writes `value` as JSON or YAML when `output` asks for either (then `true`); the
/// table formats are the caller's (`false`).
pub(crate) fn emit(value: &impl Serialize, output: Output) -> Result<bool, Failure> {
    match output {
        Output::Json => write_json(value).map(|()| true),
        Output::Yaml => write_yaml(value).map(|()| true),
        Output::Table | Output::Wide => Ok(false),
    }
}

fn failed(e: &dyn std::fmt::Display) -> Failure {
    Failure::Unusable(format!("cannot write to stdout: {e}"))
}

/// Streams `value` to a buffered stdout as pretty JSON, every number that is not an
/// integer rounded by [`round4`]: a plan of thousands of claims is never held as one
/// string next to the plan itself.
pub(crate) fn write_json(value: &impl Serialize) -> Result<(), Failure> {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Rounded::default());
    value.serialize(&mut ser).map_err(|e| failed(&e))?;
    out.write_all(b"\n").map_err(|e| failed(&e))?;
    out.flush().map_err(|e| failed(&e))
}

/// `value` as YAML, numbers rounded as in [`write_json`].
pub(crate) fn write_yaml(value: &impl Serialize) -> Result<(), Failure> {
    let mut tree = serde_json::to_value(value).map_err(|e| failed(&e))?;
    round_all(&mut tree);
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    serde_yaml_ng::to_writer(&mut out, &tree).map_err(|e| failed(&e))?;
    out.flush().map_err(|e| failed(&e))
}

/// Rounds every float in `value` by [`round4`].
pub(crate) fn round_all(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Number(n) if n.is_f64() => {
            if let Some(rounded) = n
                .as_f64()
                .and_then(|f| serde_json::Number::from_f64(round4(f)))
            {
                *n = rounded;
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(round_all),
        serde_json::Value::Object(map) => map.values_mut().for_each(round_all),
        _ => {}
    }
}

/// serde_json's pretty formatter, writing floats rounded by [`round4`].
#[derive(Default)]
struct Rounded(serde_json::ser::PrettyFormatter<'static>);

impl serde_json::ser::Formatter for Rounded {
    fn write_f64<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: f64,
    ) -> std::io::Result<()> {
        self.0.write_f64(writer, round4(value))
    }
    fn write_f32<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: f32,
    ) -> std::io::Result<()> {
        self.0.write_f64(writer, round4(f64::from(value)))
    }
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(value: &impl Serialize) -> String {
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, Rounded::default());
        value.serialize(&mut ser).unwrap_or_else(|e| panic!("{e}"));
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn prices_are_written_to_four_decimals_and_never_as_minus_zero() {
        assert_eq!(dollars(-0.00001), "0.0000");
        assert_eq!(dollars(-0.0), "0.0000");
        assert_eq!(dollars(0.0768), "0.0768");
        assert_eq!(dollars(-0.25), "-0.2500");
        let written = json(&[0.1 + 0.1 + 0.004, -1e-9, 3.0, 1.5e-5]);
        assert_eq!(written, "[\n  0.204,\n  0.0,\n  3.0,\n  0.0\n]");
        assert_eq!(json(&7_u32), "7");
    }

    #[test]
    fn yaml_rounds_the_same_numbers() {
        let mut value = serde_json::json!({"a": [0.1 + 0.2, -0.00001]});
        round_all(&mut value);
        assert_eq!(value, serde_json::json!({"a": [0.3, 0.0]}));
    }
}
