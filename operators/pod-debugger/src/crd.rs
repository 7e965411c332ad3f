//! The `PodDebugger` custom resource (`flotilla.dev/v1alpha1`). Every
//! field's doc comment is its `kubectl explain` description; the schema and
//! its CEL rules reject at admission what the API would reject later (an
//! empty image, an unknown profile, maxPerPod outside 1..10).

use flotilla_shared::duration::GoDuration;
use flotilla_shared::selector::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Adds an ephemeral debug container to the running pods of this
/// namespace that match a label, once per pod and container spec, so a
/// distroless pod gets a shell: `kubectl exec -it <pod> -c <container> -- sh`.
/// Ephemeral containers can never be changed or removed from a pod. With
/// spec.mode copy it makes a debug copy of each crash-looping one instead.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = kube::core::Rule::new(
    "!(has(self.expiresAt) && has(self.ttl))"
).message("give expiresAt or ttl, not both"))]
#[x_kube(validation = kube::core::Rule::new(
    "!(has(self.expiresAt) || has(self.ttl)) || (has(self.command) && size(self.command) > 0)"
).message("an expiring PodDebugger needs spec.command: only an explicit command can be run under the expiry's deadline (the image's entrypoint is unknown to the operator)"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.copy) || (has(self.mode) && self.mode == 'copy')"
).message("spec.copy applies only with mode: copy"))]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "PodDebugger",
    doc = "Adds an ephemeral debug container to the running pods that match a label, once (or, with spec.mode copy, makes a debug copy of each crash-looping one), within Pod Security and the operator's image allow-list.",
    namespaced,
    status = "PodDebuggerStatus",
    shortname = "pd",
    shortname = "pdbg",
    category = "flotilla",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image"}"#,
    printcolumn = r#"{"name":"Matched","type":"integer","jsonPath":".status.matched","description":"running pods the selector matches"}"#,
    printcolumn = r#"{"name":"Injected","type":"integer","jsonPath":".status.injected","description":"matched pods that have the current debug container"}"#,
    printcolumn = r#"{"name":"Copies","type":"integer","priority":1,"jsonPath":".status.copies","description":"debug copies of crash-looping pods (mode: copy)"}"#,
    printcolumn = r#"{"name":"Expires","type":"string","jsonPath":".status.expiresAt","description":"when debug access ends"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message","description":"the Ready condition's message (kubectl get -o wide)"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PodDebuggerSpec {
    /// Which pods of this PodDebugger's namespace get the debug container,
    /// by label (the seed's app=payment). Must not be empty: an empty
    /// selector would put a container into every pod of the namespace.
    #[x_kube(validation = kube::core::Rule::new(
        "(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)"
    ).message("selector must not be empty: give matchLabels or matchExpressions"))]
    pub selector: LabelSelector,
    /// The debug container's image, e.g. busybox:1.37. The operator runs
    /// only images its --allowed-images list allows; others are refused with
    /// Ready=False ImageNotAllowed.
    #[schemars(length(min = 1, max = 512), pattern(r"^[^\s]+$"))]
    pub image: String,
    /// When the kubelet pulls the image (Always, IfNotPresent, Never).
    /// Omitted: the API's default (Always for :latest, else IfNotPresent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// The container whose process namespace the debug container joins
    /// (kubectl debug --target), so `ps` shows its processes. Omitted: the
    /// pod's first container. Pods without it are skipped (TargetNotFound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub target_container: Option<String>,
    /// The entrypoint. Omitted: the image's. With stdin and tty (the
    /// default) a shell stays up; set e.g. [sleep, "86400"] otherwise.
    /// Required with expiresAt or ttl: the operator runs it as
    /// `timeout -s KILL <seconds left> <command...>`, so the image must
    /// have a `timeout` command (busybox and the toolbox do).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub command: Vec<String>,
    /// Arguments to the entrypoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub args: Vec<String>,
    /// Environment variables (literal values only: no references to
    /// Secrets or ConfigMaps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub env: Vec<EnvVar>,
    /// The security profile, as kubectl debug --profile: legacy (nothing
    /// set), general (adds SYS_PTRACE; the default), baseline (nothing set),
    /// restricted (non-root, drop ALL, no privilege escalation, seccomp
    /// RuntimeDefault), netadmin (adds NET_ADMIN and NET_RAW), sysadmin
    /// (privileged). A profile the namespace's Pod Security enforce level
    /// would reject is refused before any pod is touched (ProfileForbidden).
    #[serde(default)]
    #[schemars(default = "Profile::default")]
    pub profile: Profile,
    /// Keep stdin open, so `kubectl attach -it` works (default true).
    #[serde(default = "default_true")]
    #[schemars(default = "default_true")]
    pub stdin: bool,
    /// Allocate a TTY (default true).
    #[serde(default = "default_true")]
    #[schemars(default = "default_true")]
    pub tty: bool,
    /// At most this many debug containers from this PodDebugger on one pod
    /// (1-10, default 3). Each spec change adds a new container to the pods
    /// that lack the current one, until this limit; ephemeral containers
    /// cannot be removed, only the pod's replacement clears them.
    #[serde(default = "default_max_per_pod")]
    #[schemars(default = "default_max_per_pod", range(min = 1, max = 10))]
    pub max_per_pod: i32,
    /// When debug access ends (RFC 3339, e.g. 2026-11-27T18:00:00Z). From
    /// then on no debug container is added (Ready=False, reason Expired),
    /// and every container added before runs its command under a deadline
    /// (`timeout -s KILL`) that ends it at this time: ephemeral containers
    /// cannot be removed, but they can end. Needs spec.command. Not with ttl.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
    /// Debug access ends this long after the PodDebugger was created
    /// (its creationTimestamp), a duration like 30m, 8h or 1h30m; as
    /// expiresAt otherwise. Needs spec.command. Not with expiresAt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<GoDuration>,
    /// Volumes of the pod to mount into the debug container
    /// (kubernetes#114184), at the paths the target container mounts them:
    /// `mirror: true` for every volume mount of the target container, or
    /// `names` for some of the pod's volumes. Read-only unless readWrite.
    /// Secret volumes (and projected volumes with Secret or service account
    /// token sources) are mounted only with `secrets: true`. Volumes not
    /// mounted are listed per pod in status.pods with the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mounts: Option<VolumeMounts>,
    /// inject (the default): an ephemeral debug container in each matched
    /// running pod. copy: for each matched pod that is crash-looping (a
    /// container waiting in CrashLoopBackOff, or ended with an error
    /// after restarts), one copy of the pod
    /// (`<pod>-dbg-<hash>`, without the pod's labels, so no Service or
    /// controller adopts it, and owned by this PodDebugger) whose target
    /// container runs spec.copy.command instead of its own with the same
    /// image, env and mounts, and that has the debug container beside it,
    /// sharing its process namespace: `kubectl debug --copy-to`, declared.
    /// The target is spec.targetContainer, else the pod's first
    /// crash-looping container. Copies are deleted at the expiry and with
    /// the PodDebugger. Needs the operator's --debug-copies (the chart's
    /// debugCopies.enabled) and, under the chart's admission policy, the
    /// right to create pods in this namespace.
    #[serde(default)]
    #[schemars(default = "Mode::default")]
    pub mode: Mode,
    /// How copies are made (mode: copy only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<CopySpec>,
}

/// How a PodDebugger reaches a pod.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// An ephemeral container in each matched running pod.
    #[default]
    Inject,
    /// A debug copy of each matched crash-looping pod.
    Copy,
}

/// Debug copies (spec.mode: copy).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopySpec {
    /// What the copy's target container runs instead of its own command,
    /// so it stays up to be looked at (default [sleep, infinity]). Under
    /// expiresAt or ttl it runs under the same deadline as the debug
    /// container.
    #[serde(default = "default_copy_command")]
    #[schemars(default = "default_copy_command", length(min = 1, max = 32))]
    pub command: Vec<String>,
    /// At most this many copies of this PodDebugger exist at once (1-10,
    /// default 3); crash-looping pods past it are listed in status.pods as
    /// MaxCopiesReached.
    #[serde(default = "default_max_copies")]
    #[schemars(default = "default_max_copies", range(min = 1, max = 10))]
    pub max_copies: i32,
}

impl Default for CopySpec {
    fn default() -> Self {
        CopySpec { command: default_copy_command(), max_copies: default_max_copies() }
    }
}

fn default_copy_command() -> Vec<String> {
    vec!["sleep".into(), "infinity".into()]
}
fn default_max_copies() -> i32 {
    3
}

/// Which of the pod's volumes the debug container mounts.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "(has(self.mirror) && self.mirror) != (has(self.names) && size(self.names) > 0)"
).message("give mirror: true or a list of names, not both"))]
pub struct VolumeMounts {
    /// Mount every volume mount of the target container, at the same path.
    /// subPath mounts are skipped (SubPathNotAllowed): the API refuses them
    /// on ephemeral containers.
    #[serde(default)]
    pub mirror: bool,
    /// Mount these volumes of the pod, at the path(s) the target container
    /// mounts each at. Names the pod lacks (NotInPod) or the target does not
    /// mount (NotMountedByTarget) are skipped, as subPath mounts are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub names: Vec<VolumeName>,
    /// Keep the target's mode (read-write where it writes). Default false:
    /// every mount is read-only.
    #[serde(default)]
    pub read_write: bool,
    /// Mount Secret volumes too (secret, and projected volumes with Secret
    /// or service account token sources). Writing true needs `get` on
    /// Secrets in this namespace, which the chart's admission policy checks;
    /// the operator mounts them only while it requires that policy
    /// (--require-admission-policy) and the policy is in place. Otherwise
    /// they are skipped (SecretVolumeNotAllowed).
    #[serde(default)]
    pub secrets: bool,
}

/// A pod volume's name (a DNS label).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
pub struct VolumeName(#[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))] pub String);

fn default_true() -> bool {
    true
}
fn is_zero(n: &i32) -> bool {
    *n == 0
}
fn default_max_per_pod() -> i32 {
    3
}

/// A literal environment variable.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct EnvVar {
    /// Its name.
    #[schemars(length(min = 1, max = 256), pattern(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"))]
    pub name: String,
    /// Its value.
    #[serde(default)]
    #[schemars(length(max = 4096))]
    pub value: String,
}

/// When the kubelet pulls the image.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

/// kubectl debug's profiles, as they apply to an ephemeral container.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// No security context (kubectl's old behaviour).
    Legacy,
    /// Adds the SYS_PTRACE capability, so debuggers can attach to the
    /// target's processes. Needs a privileged Pod Security level.
    #[default]
    General,
    /// No security context: fits the baseline Pod Security level.
    Baseline,
    /// Fits the restricted Pod Security level: runAsNonRoot, drop ALL
    /// capabilities, allowPrivilegeEscalation false, seccomp RuntimeDefault.
    /// The image must run as a non-root user (or the pod set runAsUser).
    Restricted,
    /// Adds NET_ADMIN and NET_RAW. Needs a privileged Pod Security level.
    Netadmin,
    /// A privileged container. Needs a privileged Pod Security level.
    Sysadmin,
}

impl Profile {
    pub const ALL: [Profile; 6] = [
        Profile::Legacy,
        Profile::General,
        Profile::Baseline,
        Profile::Restricted,
        Profile::Netadmin,
        Profile::Sysadmin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Legacy => "legacy",
            Profile::General => "general",
            Profile::Baseline => "baseline",
            Profile::Restricted => "restricted",
            Profile::Netadmin => "netadmin",
            Profile::Sysadmin => "sysadmin",
        }
    }
}

/// What the operator did with this PodDebugger.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodDebuggerStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready: the spec is allowed (image, profile against Pod Security) and
    /// every matched pod has its container or is waiting for its target.
    #[serde(default)]
    #[schemars(schema_with = "flotilla_shared::conditions::schema")]
    pub conditions: Vec<Condition>,
    /// When debug access ends (from spec.expiresAt or spec.ttl).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
    /// The current spec's debug container name (dbg-<name>-<spec hash>).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container: String,
    /// Pods the selector matches (not terminating, not static).
    #[serde(default)]
    pub matched: i32,
    /// Matched pods that have the current debug container (mode: copy:
    /// matched pods that have a debug copy).
    #[serde(default)]
    pub injected: i32,
    /// Debug copies of this PodDebugger that exist (mode: copy).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub copies: i32,
    /// Matched pods, with their debug container's state: problems first,
    /// at most 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<PodEntry>,
}

/// One matched pod.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodEntry {
    /// The pod.
    pub name: String,
    /// Its debug container from the current spec (empty until added).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container: String,
    /// Running, Waiting or Terminated (the container's state in the pod's
    /// status); Pending (not added yet: the pod or its target is not
    /// running); Skipped (will not be added: reason says why); Failed (the
    /// API refused the addition: message says why).
    pub state: String,
    /// Why, e.g. ImagePullBackOff, TargetNotFound, MaxPerPodReached,
    /// Expired, VolumesSkipped (some of spec.volumeMounts are not mounted:
    /// message names them and why); with mode: copy NotCrashLooping (no
    /// copy until a container crash-loops), MaxCopiesReached.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Its debug copy (mode: copy): `kubectl exec -it <copy> -c
    /// <container> -- sh`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub copy: String,
    /// Details, e.g. the API's refusal.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// At most this many pods listed in status.
pub const MAX_PODS_LISTED: usize = 50;

impl flotilla_shared::status::ReportedStatus for PodDebuggerStatus {
    fn conditions_mut(&mut self) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        &mut self.conditions
    }
}
