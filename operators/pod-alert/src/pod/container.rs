//! A container as a pod view keeps it: its state and last exit, in 24
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
/// 24 bytes (memory per pod, issue 28): a running container's start is
/// held inline; a state other than running or unknown, and the last
/// termination, are behind one pointer that most containers (running, no
/// recent exit) do not allocate. Read with [`ContainerView::state`] and
/// [`ContainerView::last_termination`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerView {
    pub init: bool,
    pub ready: bool,
    pub restart_count: u32,
    kind: Kind,
    /// A running container's start ([`Stamp::NONE`] otherwise).
    started_at: Stamp,
    rare: Option<Box<Rare>>,
}

/// Which state a [`ContainerView`] holds, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Running,
    Unknown,
    /// Waiting or terminated: in `rare.state`.
    Held,
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
        let mut c = Self { init, ready, restart_count, kind: Kind::Unknown, started_at: Stamp::NONE, rare: None };
        c.hold(state, last);
        c
    }

    /// The container's state (a running or unknown one made on the spot:
    /// nothing allocated).
    pub fn state(&self) -> Cow<'_, State> {
        match (self.kind, &self.rare) {
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
        (self.kind, self.started_at) = match state {
            State::Running { started_at } => (Kind::Running, started_at),
            State::Unknown => (Kind::Unknown, Stamp::NONE),
            State::Waiting(_) | State::Terminated(_) => (Kind::Held, Stamp::NONE),
        };
        let state = if self.kind == Kind::Held { state } else { State::Unknown };
        self.rare =
            (self.kind == Kind::Held || last.is_some()).then(|| Box::new(Rare { state, last_termination: last }));
    }
}
