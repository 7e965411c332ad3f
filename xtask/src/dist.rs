//! `cargo xtask dist`: the release binary each image carries, built by the
//! very command the Dockerfile runs, with what an image build would catch
//! checked here (no Docker engine on our build machines):
//! * the Dockerfile still runs that command;
//! * that command builds every image's binary in one invocation: per-package
//!   builds each enable other features of the shared dependencies (kube,
//!   hyper, rustls, tokio), so each rebuilt them — six release builds of
//!   the whole graph where one does. Images, benchmarks and the demo all
//!   run it, so a second run with nothing changed compiles nothing;
//! * the binary's dynamic dependencies are only what the runtime base
//!   (gcr.io/distroless/cc-debian12) provides, and its glibc symbol versions
//!   are not newer than Debian 12's glibc 2.36;
//! * its size, reported.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

use crate::util::{cargo, operators, root, run_cmd, say};

/// Which profile the images' binaries are built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// What ships: the Dockerfile's build.
    Release,
    /// The same command without `--release`: what `cargo xtask test` packs
    /// (see `images.rs`). Its dependencies are the tests' own build, so it
    /// costs the workspace crates only (about 30 s), and it still proves the
    /// Dockerfile's package set compiles with its own features (a feature
    /// only a dev-dependency enables would break it, not the tests).
    Dev,
}

impl Profile {
    /// The target directory's subdirectory the binaries land in.
    pub fn dir(self) -> PathBuf {
        target_dir().join(match self {
            Profile::Release => "release",
            Profile::Dev => "debug",
        })
    }
}

/// The build of every image's binary, as the Dockerfile runs it (plus
/// `--target` there): `cargo build --release --locked --package A
/// --package B ...`, the operators and loadgen in one invocation.
pub fn image_build_args(profile: Profile) -> anyhow::Result<Vec<String>> {
    let mut args: Vec<String> = ["build", "--release", "--locked"].map(String::from).to_vec();
    if profile == Profile::Dev {
        args.retain(|a| a != "--release");
    }
    for name in images()? {
        args.extend(["--package".to_string(), name]);
    }
    Ok(args)
}

/// The command line of the release build, as the Dockerfile says it.
pub fn dockerfile_build() -> anyhow::Result<String> {
    Ok(format!("cargo {}", image_build_args(Profile::Release)?.join(" ")))
}

/// Runs the build of every image's binary (compiling nothing when nothing
/// changed) and returns where the binaries are.
pub fn build_images_binaries(profile: Profile) -> anyhow::Result<PathBuf> {
    let args = image_build_args(profile)?;
    say(&format!("dist: cargo {}", args.join(" ")));
    run_cmd(cargo().args(&args))?;
    Ok(profile.dir())
}

/// The release build (see [`build_images_binaries`]).
pub fn build_release() -> anyhow::Result<PathBuf> {
    build_images_binaries(Profile::Release)
}

/// Shared libraries distroless/cc-debian12 has (glibc, libgcc).
const RUNTIME_LIBS: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libgcc_s.so.1",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];
/// glibc of Debian 12 (bookworm), the runtime base.
const MAX_GLIBC: (u32, u32) = (2, 36);

/// What gets an image: every operator, and the load-tester's runner.
pub fn images() -> anyhow::Result<Vec<String>> {
    let mut all = operators()?;
    all.push(LOADGEN.to_string());
    Ok(all)
}

/// The load-tester's runner: a workspace crate with an image of its own.
pub const LOADGEN: &str = "loadgen";

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

fn tool_output(tool: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(tool)
        .args(args)
        .output()
        .with_context(|| format!("running {tool} (binutils; `apt-get install binutils`)"))?;
    if !out.status.success() {
        bail!("{tool} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `NEEDED` entries of an ELF file.
pub fn needed_libs(readelf_dynamic: &str) -> Vec<String> {
    readelf_dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1).and_then(|r| r.split(']').next()).map(str::to_string))
        .collect()
}

/// The newest `GLIBC_x.y` symbol version referenced.
pub fn max_glibc(objdump_t: &str) -> Option<(u32, u32)> {
    objdump_t
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let mut p = v.split('.');
            Some((p.next()?.parse().ok()?, p.next().unwrap_or("0").parse().ok()?))
        })
        .max()
}

pub fn run() -> anyhow::Result<()> {
    build(&images()?, Profile::Release).map(|_| ())
}

/// Builds every image's binary in `profile`, then checks those of `names`
/// (operators, loadgen); returns where they are.
pub fn build(names: &[String], profile: Profile) -> anyhow::Result<PathBuf> {
    check_dockerfile()?;
    let dir = build_images_binaries(profile)?;
    let what = match profile {
        Profile::Release => "release binaries (what each image carries)",
        Profile::Dev => "dev-profile binaries (what each image of `cargo xtask test` carries)",
    };
    check(&dir, names, what)?;
    Ok(dir)
}

/// The Dockerfile still runs [`dockerfile_build`].
pub fn check_dockerfile() -> anyhow::Result<()> {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).context("reading Dockerfile")?;
    let command = dockerfile_build()?;
    if !dockerfile.contains(&command) {
        bail!(
            "the Dockerfile no longer runs `{command}` (every image's binary in one build): keep xtask/src/dist.rs \
             and the Dockerfile in step"
        );
    }
    Ok(())
}

/// Checks the binaries of `names` in `dir` as the runtime base needs them
/// (its shared libraries only, its glibc or older) and prints their sizes.
pub fn check(dir: &std::path::Path, names: &[String], what: &str) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for op in names {
        let op = op.as_str();
        let bin = dir.join(op);
        let size = std::fs::metadata(&bin).with_context(|| format!("{} was not built", bin.display()))?.len();
        let bin_s = bin.display().to_string();
        let dynamic = tool_output("readelf", &["-d", &bin_s])?;
        let needed = needed_libs(&dynamic);
        let foreign: Vec<&String> = needed.iter().filter(|l| !RUNTIME_LIBS.contains(&l.as_str())).collect();
        if !foreign.is_empty() {
            bail!("{op} needs libraries distroless/cc-debian12 does not have: {foreign:?}");
        }
        // Packed relative relocations (shared/build/relr.rs): the dynamic
        // section says DT_RELR; they need glibc 2.36, the base's.
        if !dynamic.contains("(RELR)") {
            bail!("{op} is not linked with packed relocations (its Cargo.toml's build = \"…/shared/build/relr.rs\")");
        }
        let glibc = max_glibc(&tool_output("objdump", &["-T", &bin_s])?).unwrap_or((0, 0));
        if glibc > MAX_GLIBC {
            bail!(
                "{op} needs glibc {}.{}, newer than the runtime base's {}.{}",
                glibc.0,
                glibc.1,
                MAX_GLIBC.0,
                MAX_GLIBC.1
            );
        }
        rows.push(format!(
            "    {op:<16} {:>6.1} MiB   needs {}   glibc >= {}.{}",
            size as f64 / 1_048_576.0,
            needed.join(" "),
            glibc.0,
            glibc.1
        ));
    }
    say(&format!("dist: {what}:"));
    for r in rows {
        eprintln!("{r}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_needed_libraries_and_glibc_versions() {
        let dynamic = " 0x0000000000000001 (NEEDED)             Shared library: [libgcc_s.so.1]\n 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]\n 0x000000000000000c (INIT) 0x1000\n";
        assert_eq!(needed_libs(dynamic), vec!["libgcc_s.so.1", "libc.so.6"]);
        let syms = "0000 DF *UND* 0000 (GLIBC_2.2.5) free\n0000 DF *UND* 0000 (GLIBC_2.34) __libc_start_main\n0000 w D *UND* 0000 GLIBC_2.28 x\n";
        assert_eq!(max_glibc(syms), Some((2, 34)));
    }
}
