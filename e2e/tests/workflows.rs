//! The GitHub workflows exist and pass actionlint.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flotilla_e2e::root;
use flotilla_testenv::build::tools::ACTIONLINT;

#[test]
fn workflows_pass_actionlint() {
    let dir = root().join(".github").join("workflows");
    for wf in ["ci.yml", "e2e.yml", "release.yml"] {
        assert!(dir.join(wf).is_file(), ".github/workflows/{wf} is missing");
    }
    let bin = ACTIONLINT.locate().unwrap_or_else(|e| panic!("{e}"));
    let out =
        std::process::Command::new(bin).arg("-no-color").current_dir(root()).output().expect("running actionlint");
    assert!(
        out.status.success(),
        "actionlint found problems:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
