//! Running a cluster: the control plane ([`control_plane`]) with its own CA
//! ([`pki`]) and kubeconfigs ([`kubeconfig`]), the one real node ([`node`]),
//! simulated nodes ([`kwok`]), and the processes they are ([`process`]).

pub mod control_plane;
pub mod kubeconfig;
pub mod kwok;
pub mod node;
pub mod pki;
pub mod process;
