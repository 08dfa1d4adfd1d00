//! The `pinwatch` command's library part: the HTML report (`pinwatch report`), which `tour`
//! writes too. The command itself is `src/main.rs`.

pub mod report;
