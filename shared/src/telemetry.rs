//! Logging: `text` or `json` lines on stderr, filtered by `RUST_LOG` when it
//! is set (per-module directives), else by `--log-level` (default `info`). Each reconcile runs in a `reconcile` span carrying the
//! controller, object and namespace, so every line it logs says which object.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogFormat, LogLevel};

/// The filter directives: `RUST_LOG` when set to something that parses (an
/// operator's habit, and the only way to filter per module), else the level.
fn directives(rust_log: Option<&str>, level: LogLevel) -> String {
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        Some(env) if EnvFilter::try_new(env).is_ok() => env.to_string(),
        _ => level.directive().to_string(),
    }
}

/// Installs the global subscriber. Calling it twice is harmless (the second
/// call changes nothing), which keeps tests simple.
pub fn init(format: LogFormat, level: LogLevel) {
    let rust_log = std::env::var(EnvFilter::DEFAULT_ENV).ok();
    let filter = EnvFilter::new(directives(rust_log.as_deref(), level));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Text => registry.with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr)).try_init(),
    };
    drop(result);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_wins_over_the_level_when_set_and_valid() {
        assert_eq!(directives(None, LogLevel::Debug), "debug");
        assert_eq!(directives(Some(""), LogLevel::Warn), "warn");
        assert_eq!(directives(Some("info,kube=warn"), LogLevel::Error), "info,kube=warn");
        // A RUST_LOG that does not parse is ignored, as before --log-level.
        assert_eq!(directives(Some("=[{"), LogLevel::Trace), "trace");
    }
}
