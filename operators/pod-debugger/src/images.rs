//! The image allow-list (`--allowed-images`). Whoever may create a
//! PodDebugger can run its image inside every matching pod of the
//! namespace, so the cluster admin decides which images those are. Pure.

/// The default list, binary and chart alike: busybox by any tag from the
/// default registry or any other, and the test toolbox. Narrow it to your
/// own registry (`registry.example.com/debug/*`) in production:
/// `**/busybox:*` trusts whoever publishes a "busybox" anywhere.
pub const DEFAULT_ALLOWED: [&str; 4] = ["busybox", "busybox:*", "**/busybox:*", "localhost/flotilla/toolbox:*"];

/// Image globs, path-aware: `*` matches a run of characters within one
/// path segment (never `/`), `**` any run across segments, `?` one
/// character other than `/`; an image is allowed when any glob matches it
/// whole. So a tag pattern cannot reach into a path: `busybox:*` is
/// busybox at any tag, never `busybox:5000/any/img` (a registry on port
/// 5000 named `busybox`), and `registry.example.com/debug/*` is that
/// folder's images, not its subfolders'.
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
        if self.globs.iter().any(|g| image_glob_match(g, image)) {
            Ok(())
        } else {
            Err(format!("image {image:?} is not in the operator's --allowed-images ({})", self.globs.join(", ")))
        }
    }
}

/// Whether `image` matches `glob` whole (see [`ImagePolicy`]): dynamic
/// programming over both, so no glob makes it backtrack exponentially.
pub fn image_glob_match(glob: &str, image: &str) -> bool {
    #[derive(Clone, Copy)]
    enum Tok {
        Char(char),
        One,
        Segment,
        Any,
    }
    let mut toks = Vec::new();
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        toks.push(match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                Tok::Any
            }
            '*' => Tok::Segment,
            '?' => Tok::One,
            c => Tok::Char(c),
        });
    }
    let text: Vec<char> = image.chars().collect();
    // matched[j]: the glob so far matches text[..j].
    let mut matched = vec![false; text.len() + 1];
    matched[0] = true;
    for tok in toks {
        let mut next = vec![false; text.len() + 1];
        for j in 0..=text.len() {
            next[j] = match tok {
                Tok::Char(c) => j > 0 && matched[j - 1] && text[j - 1] == c,
                Tok::One => j > 0 && matched[j - 1] && text[j - 1] != '/',
                // Zero characters, or one more (not a `/`) after a match.
                Tok::Segment => matched[j] || (j > 0 && next[j - 1] && text[j - 1] != '/'),
                Tok::Any => matched[j] || (j > 0 && next[j - 1]),
            };
        }
        matched = next;
    }
    matched[text.len()]
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
            // A registry on port 5000 called busybox is not a busybox tag.
            "busybox:5000/any/img",
            "busybox:5000/library/busybox-evil:1",
            "localhost/flotilla/toolbox:1/../../evil/img",
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
        assert!(p.check("registry.example.com/debug/sub/tools:1").is_err(), "* stays within its folder");
    }

    #[test]
    fn star_stays_within_a_segment_and_double_star_crosses() {
        assert!(image_glob_match("busybox:*", "busybox:1.37"));
        assert!(!image_glob_match("busybox:*", "busybox:5000/any/img"));
        assert!(image_glob_match("**/busybox:*", "docker.io/library/busybox:latest"));
        assert!(image_glob_match("**/busybox:*", "r/busybox:1"));
        assert!(!image_glob_match("**/busybox:*", "r/busybox:5000/x"));
        assert!(image_glob_match("a/**", "a/b/c:d"));
        assert!(image_glob_match("a?c", "abc"));
        assert!(!image_glob_match("a?c", "a/c"));
        assert!(image_glob_match("*", ""));
        assert!(!image_glob_match("", "a"));
        assert!(image_glob_match("***", "a/b"), "three stars: ** then *");
    }

    /// A regex with the same meaning, for the property test.
    fn glob_to_regex(glob: &str) -> regex::Regex {
        let mut re = String::from("^");
        let mut chars = glob.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '*' if chars.peek() == Some(&'*') => {
                    chars.next();
                    re.push_str(".*");
                }
                '*' => re.push_str("[^/]*"),
                '?' => re.push_str("[^/]"),
                c => re.push_str(&regex::escape(&c.to_string())),
            }
        }
        re.push('$');
        regex::Regex::new(&re).unwrap_or_else(|e| panic!("{e}"))
    }

    proptest::proptest! {
        #[test]
        fn image_globs_agree_with_a_regex(glob in "[ab/:*?]{0,8}", image in "[ab/:]{0,10}") {
            proptest::prop_assert_eq!(image_glob_match(&glob, &image), glob_to_regex(&glob).is_match(&image));
        }
    }
}
