//! `cargo xtask bench config-copier`: see the operator's issue for what it measures.

pub fn run() -> anyhow::Result<()> {
    anyhow::bail!("no benchmark for config-copier yet")
}
