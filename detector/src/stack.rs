//! Stack samples of a pinned worker (filled in by the stack issue).

use crate::slot::Slot;
use crate::Error;

pub(crate) fn install_handler() -> Result<(), Error> {
    Ok(())
}

pub(crate) fn sample(_slot: &Slot, _tid: i32) -> Option<Vec<usize>> {
    None
}

#[derive(Default)]
pub(crate) struct Resolver;

impl Resolver {
    pub(crate) fn resolve(&mut self, _ips: &[usize]) -> Vec<crate::event::Frame> {
        Vec::new()
    }
}

pub(crate) fn mark_lock_frames(_frames: &mut [crate::event::Frame], _held: &[crate::sync::HeldRaw]) {}
