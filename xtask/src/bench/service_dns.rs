//! `cargo xtask bench service-dns`: see the operator's issue for what it measures.

pub fn run() -> anyhow::Result<()> {
    anyhow::bail!("no benchmark for service-dns yet")
}
