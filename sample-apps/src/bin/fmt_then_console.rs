//! A service that installs its own `tracing` subscriber first, then builds its runtime with
//! pinwatch from the environment: with `PINWATCH_CONSOLE=on` pinwatch cannot install the
//! console's subscriber, and says so at start-up — what to write instead — rather than run on
//! without a console.
//!
//! `PINWATCH_CONSOLE=on cargo run -p sample-apps --bin fmt_then_console`

const USAGE: &str = "\
fmt_then_console: installs its own tracing subscriber, then builds a runtime with pinwatch

Usage: PINWATCH_CONSOLE=on fmt_then_console   (pinwatch says what to write instead)";

fn main() -> std::process::ExitCode {
    if let Err(code) = sample_apps::fixture_arg("fmt_then_console", USAGE, &[]) {
        return code;
    }
    tracing_subscriber::fmt().init();
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2).enable_all();
    let built = pinwatch::Builder::from_env().and_then(|b| b.build(&mut tokio));
    match built {
        Ok((rt, detector)) => {
            rt.block_on(async { tokio::task::yield_now().await });
            drop(rt);
            drop(detector);
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fmt_then_console: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
