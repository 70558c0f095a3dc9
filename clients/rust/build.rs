//! Generates the gRPC client code (no servers) from the repository's `proto/`, like the
//! gateway's own build script. `protoc` comes from `protoc-bin-vendored`; set `PROTOC` to use
//! another one.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_none() {
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let protos =
        ["common.proto", "election.proto", "lock.proto"].map(|p| root.join("zkgate/v1").join(p));
    tonic_prost_build::configure()
        .build_server(false)
        .compile_protos(&protos, &[root])?;
    for p in protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    Ok(())
}
