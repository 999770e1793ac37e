//! The functions' log subscriber.
//!
//! `lambda_runtime::tracing::init_default_subscriber()` prints no time (it is built
//! `without_time()`): a line copied out of CloudWatch, or read from a local run, then
//! says nothing about when. This is the same subscriber with a UTC timestamp
//! (RFC 3339, microseconds) on every line, and in JSON a `timestamp` field:
//! - JSON when the function's log format is JSON (`AWS_LAMBDA_LOG_FORMAT=JSON`), text
//!   otherwise, no colours;
//! - the level from `AWS_LAMBDA_LOG_LEVEL` (Lambda's advanced logging controls, which
//!   win: FATAL means ERROR), else `RUST_LOG` (full `EnvFilter` directives), else INFO.

use std::str::FromStr;

use lambda_runtime::tracing::subscriber::filter::{EnvFilter, LevelFilter};
use lambda_runtime::tracing::subscriber::fmt::MakeWriter;
use lambda_runtime::tracing::subscriber::fmt::time::SystemTime;
use lambda_runtime::tracing::subscriber::util::SubscriberInitExt;
use tracing::Subscriber;

/// What the environment asks of the logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogSettings {
    /// `AWS_LAMBDA_LOG_FORMAT`: "JSON" or "Text".
    pub format: Option<String>,
    /// `AWS_LAMBDA_LOG_LEVEL`: TRACE, DEBUG, INFO, WARN, ERROR or FATAL.
    pub lambda_level: Option<String>,
    /// `RUST_LOG`.
    pub rust_log: Option<String>,
}

impl LogSettings {
    pub fn from_env() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        LogSettings {
            format: var("AWS_LAMBDA_LOG_FORMAT"),
            lambda_level: var("AWS_LAMBDA_LOG_LEVEL"),
            rust_log: var("RUST_LOG"),
        }
    }

    fn json(&self) -> bool {
        self.format
            .as_deref()
            .is_some_and(|f| f.trim().eq_ignore_ascii_case("json"))
    }

    fn filter(&self) -> EnvFilter {
        match (&self.lambda_level, &self.rust_log) {
            (Some(level), _) => {
                let level = match level.trim() {
                    l if l.eq_ignore_ascii_case("fatal") => LevelFilter::ERROR,
                    l => LevelFilter::from_str(l).unwrap_or(LevelFilter::INFO),
                };
                EnvFilter::default().add_directive(level.into())
            }
            (None, Some(directives)) => EnvFilter::builder()
                .with_default_directive(LevelFilter::INFO.into())
                .parse_lossy(directives),
            (None, None) => EnvFilter::default().add_directive(LevelFilter::INFO.into()),
        }
    }
}

/// The subscriber for `settings`, writing to `writer`.
pub fn subscriber<W>(settings: &LogSettings, writer: W) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = lambda_runtime::tracing::subscriber::fmt()
        .with_target(false)
        .with_ansi(false)
        .with_timer(SystemTime)
        .with_env_filter(settings.filter())
        .with_writer(writer);
    if settings.json() {
        Box::new(builder.json().finish())
    } else {
        Box::new(builder.finish())
    }
}

/// Installs the subscriber for the environment, writing to stdout (Lambda sends
/// stdout to CloudWatch). A second call leaves the first subscriber in place.
pub fn init_tracing() {
    let _ = subscriber(&LogSettings::from_env(), std::io::stdout).try_init();
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'w self) -> Buffer {
            self.clone()
        }
    }

    fn logged(settings: LogSettings) -> String {
        let buffer = Buffer::default();
        tracing::subscriber::with_default(subscriber(&settings, buffer.clone()), || {
            tracing::debug!("hidden at INFO");
            tracing::info!(pods = 3, "provisioning");
        });
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    /// "2026-05-01T10:00:00.123456Z": the subscriber's RFC 3339 UTC form.
    fn is_timestamp(text: &str) -> bool {
        let b = text.as_bytes();
        text.len() >= 20
            && text.ends_with('Z')
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b'T'
            && b[13] == b':'
            && b[16] == b':'
            && text[..4].parse::<u32>().is_ok_and(|y| y >= 2024)
    }

    #[test]
    fn a_text_line_starts_with_a_timestamp() {
        let text = logged(LogSettings::default());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let (time, rest) = lines[0].split_once(' ').unwrap();
        assert!(is_timestamp(time), "{text}");
        assert!(
            rest.contains("INFO") && rest.contains("provisioning pods=3"),
            "{text}"
        );
        assert!(!text.contains('\u{1b}'), "no colour codes: {text:?}");
    }

    #[test]
    fn a_json_line_has_a_timestamp_field() {
        let text = logged(LogSettings {
            format: Some("JSON".into()),
            ..LogSettings::default()
        });
        let line: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
        assert!(
            line["timestamp"].as_str().is_some_and(is_timestamp),
            "{line}"
        );
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["fields"]["message"], "provisioning");
        assert_eq!(line["fields"]["pods"], 3);
    }

    #[test]
    fn the_lambda_log_level_wins_over_rust_log_and_fatal_means_error() {
        let debug = logged(LogSettings {
            lambda_level: Some("DEBUG".into()),
            rust_log: Some("error".into()),
            ..LogSettings::default()
        });
        assert!(debug.contains("hidden at INFO"), "{debug}");
        let fatal = logged(LogSettings {
            lambda_level: Some("FATAL".into()),
            ..LogSettings::default()
        });
        assert_eq!(fatal, "");
        let rust_log = logged(LogSettings {
            rust_log: Some("warn".into()),
            ..LogSettings::default()
        });
        assert_eq!(rust_log, "");
    }
}
