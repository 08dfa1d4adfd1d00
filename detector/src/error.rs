//! The one error type.

use std::path::PathBuf;

/// Everything that can go wrong while setting pinwatch up. Every message says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An environment variable holds a value pinwatch cannot use.
    #[error("{var}={value:?} {reason}")]
    InvalidEnv {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it, and what would be right.
        reason: String,
    },
    /// A setting given in code is out of range.
    #[error("pinwatch setting `{setting}` {reason}")]
    InvalidSetting {
        /// The builder setter.
        setting: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The recording file cannot be opened for appending.
    #[error(
        "cannot open the pinwatch recording {path:?} for appending: {source}; {}",
        record_hint(source)
    )]
    Record {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A setting asks for an exporter that this build of pinwatch does not have.
    #[error(
        "{var} is set, but this pinwatch was built without the `{feature}` cargo feature; \
         enable it (`pinwatch = {{ features = [\"{feature}\"] }}`) or unset {var}"
    )]
    MissingFeature {
        /// The variable that asked for it.
        var: &'static str,
        /// The cargo feature.
        feature: &'static str,
    },
    /// The Prometheus endpoint cannot listen.
    #[error(
        "PINWATCH_PROMETHEUS_ADDR={addr}: cannot listen there: {reason}; or unset the variable"
    )]
    PrometheusListen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why, and what to do.
        reason: String,
    },
    /// The OTLP exporter cannot start (a bad `OTEL_EXPORTER_OTLP_*` value, or its client).
    #[error("OTLP exporter: {0}")]
    Otlp(String),
    /// tokio-console's server or resources cannot start.
    #[error("tokio-console: {0}")]
    Console(String),
    /// The control socket cannot be made in the directory `PINWATCH_CONTROL` names.
    #[error("PINWATCH_CONTROL: {0}")]
    Control(String),
    /// A control directory or socket cannot be used, or a service did not answer on it as it
    /// should (`pinwatch ctl`'s side); the message names it and says what to do.
    #[error("{0}")]
    ControlSocket(String),
    /// A setting changed at run time ([`Settings::set`](crate::Settings::set), `pinwatch ctl
    /// set`) or a spelling ([`Stacks::parse`](crate::Stacks::parse)) that pinwatch cannot use.
    #[error("{key}={value:?} {reason}")]
    InvalidValue {
        /// The setting.
        key: String,
        /// The value given.
        value: String,
        /// What is wrong with it, and what would be right.
        reason: String,
    },
    /// A setting that cannot change at run time, or does not exist.
    #[error("unknown setting `{key}`; the settings that can change at run time are: {known}")]
    UnknownSetting {
        /// The key given.
        key: String,
        /// The keys that exist, comma-separated.
        known: String,
    },
    /// The flight recording could not be dumped to a file.
    #[error("cannot dump the pinwatch flight recording to {path:?}: {reason}")]
    Dump {
        /// The file asked for.
        path: PathBuf,
        /// Why, and what to do.
        reason: String,
    },
    /// tokio could not build the runtime.
    #[error("building the tokio runtime failed: {0}")]
    Runtime(#[source] std::io::Error),
    /// The watchdog thread's nice value could not be set (`PINWATCH_WATCHDOG_NICE`).
    #[error(
        "cannot set the pinwatch watchdog thread's nice value to {nice} \
         (PINWATCH_WATCHDOG_NICE, Builder::watchdog_nice): {source}; a nice below the \
         process's own needs CAP_SYS_NICE or an RLIMIT_NICE of at least {rlimit} \
         (`ulimit -e`, systemd's LimitNICE=), or leave the setting unset"
    )]
    WatchdogNice {
        /// The nice value asked for.
        nice: i8,
        /// The `RLIMIT_NICE` that would allow it (20 minus it).
        rlimit: i16,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A pinwatch thread could not be started.
    #[error("cannot start the pinwatch {what} thread: {source}")]
    Thread {
        /// Which thread.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn invalid_env(
        var: &'static str,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Error {
        Error::InvalidEnv {
            var,
            value: value.into(),
            reason: reason.into(),
        }
    }
}

/// What to do about a recording that cannot be opened: a refusal (a directory, a device, a
/// symlink another user planted: its error says which) is not a missing directory, which the
/// one hint for both had said (helper-105).
fn record_hint(e: &std::io::Error) -> &'static str {
    if e.kind() == std::io::ErrorKind::InvalidInput {
        "name another file in PINWATCH_RECORD, or unset it"
    } else {
        "check that its directory exists and is writable, or unset PINWATCH_RECORD"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recording refused for what it is does not send the user to look for its directory.
    #[test]
    fn a_refused_recording_is_not_said_to_need_its_directory() {
        let record = |kind, text: &str| {
            Error::Record {
                path: "/tmp/rec.jsonl".into(),
                source: std::io::Error::new(kind, text.to_owned()),
            }
            .to_string()
        };
        let refused = record(
            std::io::ErrorKind::InvalidInput,
            "a symlink another user made",
        );
        assert!(!refused.contains("directory exists"), "{refused}");
        assert!(refused.contains("name another file"), "{refused}");
        let missing = record(std::io::ErrorKind::NotFound, "No such file or directory");
        assert!(
            missing.contains("check that its directory exists"),
            "{missing}"
        );
    }
}
