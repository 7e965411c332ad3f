//! The image allow-list (`--allowed-images`). Whoever may create a
//! PodDebugger can run its image inside every matching pod of the
//! namespace, so the cluster admin decides which images those are. Pure.

use flotilla_shared::selector::glob_match;

/// The default list, binary and chart alike: busybox by any tag from the
/// default registry or any other, and the test toolbox. Narrow it to your
/// own registry (`registry.example.com/debug/*`) in production: `*/busybox:*`
/// trusts whoever publishes a "busybox" anywhere.
pub const DEFAULT_ALLOWED: [&str; 4] = ["busybox", "busybox:*", "*/busybox:*", "localhost/flotilla/toolbox:*"];

/// Image globs: `*` matches any run of characters (including `/` and `:`),
/// `?` one character; an image is allowed when any glob matches it whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePolicy {
    globs: Vec<String>,
}

impl ImagePolicy {
    /// Checks the globs: non-empty, no whitespace, at most 512 characters.
    pub fn new(globs: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let globs: Vec<String> = globs.into_iter().map(|g| g.trim().to_string()).filter(|g| !g.is_empty()).collect();
        for g in &globs {
            if g.len() > 512 || g.chars().any(char::is_whitespace) {
                return Err(format!("{g:?} is not an image glob"));
            }
        }
        if globs.is_empty() {
            return Err("the list is empty: no PodDebugger could run".into());
        }
        Ok(Self { globs })
    }

    pub fn default_list() -> Self {
        Self { globs: DEFAULT_ALLOWED.iter().map(|g| (*g).to_string()).collect() }
    }

    /// Whether `image` may run; the refusal names the list.
    pub fn check(&self, image: &str) -> Result<(), String> {
        if self.globs.iter().any(|g| glob_match(g, image)) {
            Ok(())
        } else {
            Err(format!("image {image:?} is not in the operator's --allowed-images ({})", self.globs.join(", ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_list_allows_busybox_and_the_toolbox_only() {
        let p = ImagePolicy::default_list();
        for ok in [
            "busybox",
            "busybox:1.37",
            "docker.io/library/busybox:latest",
            "registry.example.com/mirror/busybox:1.36",
            "localhost/flotilla/toolbox:latest",
        ] {
            assert!(p.check(ok).is_ok(), "{ok}");
        }
        for refused in [
            "alpine",
            "busyboxx:1",
            "nicolaka/netshoot:latest",
            "busybox@sha256:0000",
            "evil/busybox-shell:1",
            "localhost/flotilla/toolbox",
        ] {
            let e = p.check(refused).err().unwrap_or_default();
            assert!(e.contains("--allowed-images"), "{refused} was allowed");
        }
    }

    #[test]
    fn a_bad_list_is_refused() {
        assert!(ImagePolicy::new(vec![String::new()]).is_err());
        assert!(ImagePolicy::new(vec!["a b".into()]).is_err());
        let p = ImagePolicy::new(vec!["registry.example.com/debug/*".into()]).unwrap_or_else(|e| panic!("{e}"));
        assert!(p.check("registry.example.com/debug/tools:1").is_ok());
        assert!(p.check("busybox").is_err());
    }
}
