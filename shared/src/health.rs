//! Readiness: ready when every controller's cache has synced while leading,
//! or while standing by healthily (the lease is reachable) under leader
//! election; never while starting or shutting down.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Starting,
    Standby { healthy: bool },
    Active,
    ShuttingDown,
}

/// Shared readiness state, cheap to clone.
#[derive(Debug, Clone)]
pub struct Readiness {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct State {
    mode: Mode,
    controllers: BTreeMap<String, bool>,
}

impl Default for Readiness {
    fn default() -> Self {
        Self { inner: Arc::new(Mutex::new(State { mode: Mode::Starting, controllers: BTreeMap::new() })) }
    }
}

impl Readiness {
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut guard = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }

    /// Waiting for the lease; `healthy` = the last attempt reached the API.
    pub fn set_standby(&self, healthy: bool) {
        self.with(|s| {
            if s.mode != Mode::ShuttingDown {
                s.mode = Mode::Standby { healthy };
            }
        });
    }

    /// Running controllers (leading, or no leader election).
    pub fn set_active(&self) {
        self.with(|s| {
            if s.mode != Mode::ShuttingDown {
                s.mode = Mode::Active;
            }
        });
    }

    pub fn set_shutting_down(&self) {
        self.with(|s| s.mode = Mode::ShuttingDown);
    }

    /// A controller whose cache is not synced yet.
    pub fn register(&self, controller: &str) {
        self.with(|s| s.controllers.insert(controller.to_string(), false));
    }

    pub fn set_synced(&self, controller: &str) {
        self.with(|s| s.controllers.insert(controller.to_string(), true));
    }

    /// `Ok` when ready, else why not.
    pub fn check(&self) -> Result<(), String> {
        self.with(|s| match s.mode {
            Mode::Starting => Err("starting".into()),
            Mode::ShuttingDown => Err("shutting down".into()),
            Mode::Standby { healthy: true } => Ok(()),
            Mode::Standby { healthy: false } => Err("standing by, but the leader-election lease cannot be read".into()),
            Mode::Active if s.controllers.is_empty() => Err("no controller started yet".into()),
            Mode::Active => {
                let waiting: Vec<&str> =
                    s.controllers.iter().filter(|(_, ok)| !**ok).map(|(n, _)| n.as_str()).collect();
                if waiting.is_empty() { Ok(()) } else { Err(format!("caches not synced: {}", waiting.join(", "))) }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle() {
        let r = Readiness::default();
        assert!(r.check().is_err());
        r.set_standby(false);
        assert!(r.check().is_err());
        r.set_standby(true);
        assert!(r.check().is_ok());
        r.set_active();
        assert!(r.check().is_err(), "active without controllers is not ready");
        r.register("a");
        r.register("b");
        r.set_synced("a");
        assert_eq!(r.check(), Err("caches not synced: b".into()));
        r.set_synced("b");
        assert!(r.check().is_ok());
        r.set_shutting_down();
        r.set_active();
        assert_eq!(r.check(), Err("shutting down".into()));
    }
}
