//! A container as a pod view keeps it: its state and last exit, in 16
//! bytes when it simply runs (memory per pod, issue 28).

use std::borrow::Cow;

use super::{ContainerId, Stamp};

/// How a container ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Termination {
    /// The usual reasons (`OOMKilled`, `Error`, …) are not allocated.
    pub reason: Cow<'static, str>,
    pub exit_code: i32,
    pub started_at: Stamp,
    pub finished_at: Stamp,
    /// The runtime's container ID: the incarnation that ended.
    pub container_id: ContainerId,
}

/// A container's current state, as read. A view keeps a running
/// container's in 4 bytes and the others behind one pointer
/// ([`ContainerView`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Waiting(Waiting),
    Running { started_at: Stamp },
    Terminated(Termination),
    Unknown,
}

/// Why a container waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub reason: Box<str>,
    pub message: Box<str>,
}

impl State {
    pub fn waiting(reason: impl Into<Box<str>>, message: impl Into<Box<str>>) -> Self {
        State::Waiting(Waiting { reason: reason.into(), message: message.into() })
    }

    /// Whether a container's crashed run is the kubelet's `previous` log:
    /// only while a new run is alive; in back-off (or terminated) the
    /// newest run is the crashed one.
    pub fn crashed_run_is_previous(&self) -> bool {
        matches!(self, State::Running { .. })
    }
}

/// One container (or init container) of a pod; its name is the pod's
/// [`Shape`]'s (at the same index: [`PodView::named_containers`]).
///
/// 16 bytes (memory per pod, issue 28: 24 before the flags and the
/// restart count shared one word, 16 bytes a pod of two containers and
/// one malloc size class): a running container's start is held inline; a
/// state other than running or unknown, and the last termination, are
/// behind one pointer that most containers (running, no recent exit) do
/// not allocate. Read with [`ContainerView::state`],
/// [`ContainerView::last_termination`], [`ContainerView::init`],
/// [`ContainerView::ready`] and [`ContainerView::restart_count`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerView {
    /// [`INIT`], [`READY`], the [`Kind`] and the restart count
    /// ([`MAX_RESTART_COUNT`] at most).
    bits: u32,
    /// A running container's start ([`Stamp::NONE`] otherwise).
    started_at: Stamp,
    rare: Option<Box<Rare>>,
}

const INIT: u32 = 1 << 31;
const READY: u32 = 1 << 30;
const KIND_SHIFT: u32 = 28;
const KIND: u32 = 0b11 << KIND_SHIFT;
/// The restart count kept at most (2^28 - 1, ~268 million: a container
/// restarting every 10 s would take 85 years; the kubelet's back-off makes
/// it longer); a higher count reads as this.
pub const MAX_RESTART_COUNT: u32 = (1 << KIND_SHIFT) - 1;

/// Which state a [`ContainerView`] holds, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Running = 0,
    Unknown = 1,
    /// Waiting or terminated: in `rare.state`.
    Held = 2,
}

/// What few containers have: a state other than running, a recent exit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rare {
    /// Waiting or terminated (`Unknown` when the kind is not `Held`).
    state: State,
    last_termination: Option<Termination>,
}

impl ContainerView {
    pub fn new(init: bool, ready: bool, restart_count: u32, state: State, last: Option<Termination>) -> Self {
        let mut c = Self { bits: if init { INIT } else { 0 }, started_at: Stamp::NONE, rare: None };
        c.set_ready(ready);
        c.set_restart_count(restart_count);
        c.hold(state, last);
        c
    }

    /// Whether it is an init container.
    pub fn init(&self) -> bool {
        self.bits & INIT != 0
    }

    pub fn ready(&self) -> bool {
        self.bits & READY != 0
    }

    pub fn set_ready(&mut self, ready: bool) {
        self.bits = if ready { self.bits | READY } else { self.bits & !READY };
    }

    /// The kubelet's restart count ([`MAX_RESTART_COUNT`] at most).
    pub fn restart_count(&self) -> u32 {
        self.bits & MAX_RESTART_COUNT
    }

    pub fn set_restart_count(&mut self, count: u32) {
        self.bits = (self.bits & !MAX_RESTART_COUNT) | count.min(MAX_RESTART_COUNT);
    }

    fn kind(&self) -> Kind {
        match (self.bits & KIND) >> KIND_SHIFT {
            0 => Kind::Running,
            2 => Kind::Held,
            _ => Kind::Unknown,
        }
    }

    fn set_kind(&mut self, kind: Kind) {
        self.bits = (self.bits & !KIND) | ((kind as u32) << KIND_SHIFT);
    }

    /// The container's state (a running or unknown one made on the spot:
    /// nothing allocated).
    pub fn state(&self) -> Cow<'_, State> {
        match (self.kind(), &self.rare) {
            (Kind::Running, _) => Cow::Owned(State::Running { started_at: self.started_at }),
            (Kind::Held, Some(rare)) => Cow::Borrowed(&rare.state),
            _ => Cow::Owned(State::Unknown),
        }
    }

    /// How its previous run ended, when that is recent enough to matter.
    pub fn last_termination(&self) -> Option<&Termination> {
        self.rare.as_ref()?.last_termination.as_ref()
    }

    pub fn set_state(&mut self, state: State) {
        let last = self.rare.take().and_then(|r| r.last_termination);
        self.hold(state, last);
    }

    pub fn set_last_termination(&mut self, last: Option<Termination>) {
        let state = self.state().into_owned();
        self.hold(state, last);
    }

    /// Holds `state` and `last` in the one form each has (equal containers
    /// are equal values).
    fn hold(&mut self, state: State, last: Option<Termination>) {
        let (kind, started_at) = match state {
            State::Running { started_at } => (Kind::Running, started_at),
            State::Unknown => (Kind::Unknown, Stamp::NONE),
            State::Waiting(_) | State::Terminated(_) => (Kind::Held, Stamp::NONE),
        };
        self.set_kind(kind);
        self.started_at = started_at;
        let state = if kind == Kind::Held { state } else { State::Unknown };
        self.rare = (kind == Kind::Held || last.is_some()).then(|| Box::new(Rare { state, last_termination: last }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_packed_flags_and_restart_count_read_back() {
        for (init, ready, count) in
            [(false, false, 0), (true, false, 7), (false, true, MAX_RESTART_COUNT), (true, true, 1)]
        {
            for state in
                [State::Running { started_at: Stamp::NONE }, State::Unknown, State::waiting("CrashLoopBackOff", "")]
            {
                let c = ContainerView::new(init, ready, count, state.clone(), None);
                assert_eq!((c.init(), c.ready(), c.restart_count()), (init, ready, count));
                assert_eq!(*c.state(), state);
            }
        }
        let mut c = ContainerView::new(true, false, u32::MAX, State::Unknown, None);
        assert_eq!(c.restart_count(), MAX_RESTART_COUNT, "a count past the bits is clamped, not wrapped");
        c.set_ready(true);
        c.set_restart_count(3);
        assert_eq!((c.init(), c.ready(), c.restart_count(), c.kind()), (true, true, 3, Kind::Unknown));
        c.set_ready(false);
        assert_eq!((c.init(), c.ready(), c.restart_count()), (true, false, 3));
    }
}
