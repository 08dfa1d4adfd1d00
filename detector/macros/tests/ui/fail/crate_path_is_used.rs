//! `crate = "…"` and `pinwatch_crate = "…"` are the paths the generated code uses: a path that
//! names nothing fails to resolve (here, with tokio renamed `tokio1`, `tokio` names nothing).

#[pinwatch::main(flavor = "current_thread", crate = "tokio")]
async fn tokio_not_renamed() {}

#[pinwatch::main(pinwatch_crate = "no_such_pinwatch")]
async fn pinwatch_renamed() {}

fn main() {}
