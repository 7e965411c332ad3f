//! The API client, from the kubeconfig as kubectl reads it.

use std::path::Path;

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A client and the namespace the context names ("default" when none).
pub async fn connect(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<(Client, String)> {
    let options = KubeConfigOptions { context: context.map(str::to_string), ..KubeConfigOptions::default() };
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
            Config::from_custom_kubeconfig(file, &options).await?
        }
        None if context.is_some() => Config::from_kubeconfig(&options).await?,
        None => Config::infer().await.context("no kubeconfig found (set KUBECONFIG or --kubeconfig)")?,
    };
    let namespace = config.default_namespace.clone();
    Ok((Client::try_from(config)?, namespace))
}

/// `e` as a person reads it: an API error is its message alone (the
/// status object around it says nothing more to a user).
pub fn readable(e: kube::Error) -> anyhow::Error {
    match e {
        kube::Error::Api(s) => anyhow::anyhow!("{}", s.message),
        other => anyhow::Error::new(other),
    }
}
