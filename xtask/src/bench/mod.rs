//! `cargo xtask bench <operator>`: benchmarks that print figures against the
//! local control plane (and emulators). Not tests: nothing here asserts a time.

mod config_copier;
mod service_dns;

pub fn run(operator: &str) -> anyhow::Result<()> {
    match operator {
        "service-dns" => service_dns::run(),
        "config-copier" => config_copier::run(),
        other => anyhow::bail!("no benchmark named {other:?}; known: service-dns, config-copier"),
    }
}
