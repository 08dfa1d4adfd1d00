//! Instrumented locks.

use crate::runtime::Shared;
use crate::slot::Slot;

#[derive(Clone, Debug)]
pub(crate) struct HeldRaw;

#[derive(Clone, Debug)]
pub(crate) struct WaitRaw;

pub(crate) fn held_by(_slot: &Slot) -> Vec<HeldRaw> {
    Vec::new()
}

pub(crate) fn waiting_for(_shared: &Shared, _slot: &Slot) -> Option<WaitRaw> {
    None
}

impl HeldRaw {
    pub(crate) fn to_event(&self) -> crate::event::HeldLock {
        unimplemented!()
    }
}

impl WaitRaw {
    pub(crate) fn to_event(&self) -> crate::event::LockHolder {
        unimplemented!()
    }
}
