//! A service that logs every request to stdout with `tracing_subscriber::fmt()`, as most do:
//! two workers, four tasks each logging a line every millisecond, pinwatch from the
//! environment. Piped into a reader that stopped (`stdout_logger | sleep 30`), its log fills
//! the pipe and blocks both workers — one in `write(2)`, the other on stdout's lock — while
//! pinwatch's recording, metrics and control socket keep going (`tests/blocked_stdout.rs`).
//!
//! `PINWATCH_RECORD=rec.jsonl cargo run --release -p sample-apps --bin stdout_logger | sleep 30`

const USAGE: &str = "\
stdout_logger: two workers, four tasks each logging a line to stdout every millisecond

Usage: stdout_logger | sleep 30   (its log fills the pipe and blocks both workers)";

fn main() -> std::process::ExitCode {
    if let Err(code) = sample_apps::fixture_arg("stdout_logger", USAGE, &[]) {
        return code;
    }
    tracing_subscriber::fmt().with_ansi(false).init();
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2).enable_all();
    let (rt, _detector) = match pinwatch::Builder::from_env().and_then(|b| b.build(&mut tokio)) {
        Ok(built) => built,
        Err(e) => {
            eprintln!("stdout_logger: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    rt.block_on(async {
        let body = "x".repeat(512);
        for task in 0..4 {
            let body = body.clone();
            tokio::spawn(async move {
                for request in 0u64.. {
                    // Blocks its worker once nobody reads stdout.
                    tracing::info!(task, request, "handled: {body}");
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            });
        }
        std::future::pending::<()>().await
    });
    std::process::ExitCode::SUCCESS
}
