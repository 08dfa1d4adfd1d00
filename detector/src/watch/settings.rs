//! The settings that can change while the service runs (`pinwatch ctl <pid> set`), shared by
//! the control thread that writes them and the watchdog and export threads that read them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::config::Settings;

/// The settings that can change at run time. Writers (the control thread) replace them whole
/// under the lock and then move the generation; readers (the watchdog once per scan, the export
/// thread once per event) load the generation and take the lock only when it moved, so a scan
/// or an event always sees one consistent set, and the per-poll path never sees any of it.
pub(crate) struct Tunables {
    generation: AtomicU64,
    settings: Mutex<Settings>,
}

impl Tunables {
    pub(crate) fn new(settings: Settings) -> Tunables {
        Tunables {
            generation: AtomicU64::new(0),
            settings: Mutex::new(settings),
        }
    }

    /// A reader's copy, refreshed when the settings change.
    pub(crate) fn reader(&self) -> SettingsReader {
        SettingsReader::new(self)
    }

    /// The settings in force now.
    pub(crate) fn get(&self) -> Settings {
        *self.settings.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the settings with `f`, all at once; when `f` fails nothing changes. Returns the
    /// settings before and after.
    pub(crate) fn update<E>(
        &self,
        f: impl FnOnce(&mut Settings) -> Result<(), E>,
    ) -> Result<(Settings, Settings), E> {
        let mut guard = self.settings.lock().unwrap_or_else(PoisonError::into_inner);
        let before = *guard;
        let mut after = before;
        f(&mut after)?;
        *guard = after;
        self.generation.fetch_add(1, Ordering::Release);
        Ok((before, after))
    }
}

/// A reader's copy of [`Tunables`], refreshed when their generation moves.
pub(crate) struct SettingsReader {
    generation: u64,
    settings: Settings,
}

impl SettingsReader {
    pub(crate) fn new(t: &Tunables) -> SettingsReader {
        SettingsReader {
            generation: t.generation.load(Ordering::Acquire),
            settings: t.get(),
        }
    }

    /// The settings in force, re-read only if they changed since the last call.
    pub(crate) fn refresh(&mut self, t: &Tunables) -> Settings {
        let g = t.generation.load(Ordering::Acquire);
        if g != self.generation {
            self.generation = g;
            self.settings = t.get();
        }
        self.settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    /// A reader never sees half of a change: every set it reads is one a writer wrote whole.
    #[test]
    fn settings_change_all_at_once_for_their_readers() {
        let base = Config::default().settings();
        let a = Settings {
            threshold: Duration::from_millis(20),
            report_interval: Duration::from_secs(1),
            ..base
        };
        let b = Settings {
            threshold: Duration::from_millis(200),
            report_interval: Duration::from_secs(5),
            ..base
        };
        let t = Arc::new(Tunables::new(a));
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let writer = {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                for i in 0..20_000 {
                    let next = if i % 2 == 0 { b } else { a };
                    t.update(|s| {
                        s.threshold = next.threshold;
                        s.report_interval = next.report_interval;
                        Ok::<(), ()>(())
                    })
                    .unwrap();
                }
                drop(done_tx);
            })
        };
        let mut current = SettingsReader::new(&t);
        loop {
            let s = current.refresh(&t);
            assert!(s == a || s == b, "a mixed set: {s:?}");
            if let Err(mpsc::TryRecvError::Disconnected) = done_rx.try_recv() {
                break;
            }
        }
        writer.join().unwrap();
        assert_eq!(current.refresh(&t), a, "the last write");
        // A failed change changes nothing.
        let r = t.update(|s| {
            s.threshold = Duration::from_secs(9);
            Err::<(), _>("no")
        });
        assert!(r.is_err());
        assert_eq!(current.refresh(&t), a);
    }
}
