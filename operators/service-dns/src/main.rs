//! `service-dns`: a Route53 record for every Service. See the README.
use clap::Parser;
use flotilla_shared::Operator;
use service_dns::{Args, Error};

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let cfg = match args.validate() {
        Ok(cfg) => cfg,
        Err(e) => e.exit(),
    };
    Operator::new("service-dns", &args.common).run(|ctx| async move {
        match service_dns::run(ctx, cfg).await {
            Ok(()) => Ok(()),
            Err(Error::Config(e)) => e.exit(),
            Err(e) => Err(anyhow::Error::new(e)),
        }
    })
}
