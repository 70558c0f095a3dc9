//! Generates the `zkgate.v1` API from the repository's `proto/` once for the workspace: the
//! messages and client stubs, a file descriptor set for server reflection, and (in a second
//! pass over the same messages) the servers. `protoc` comes from the `protoc-bin-vendored` crate
//! so that a fresh machine needs no system package to build; set `PROTOC` to use another one.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_none() {
        // SAFETY of intent: build scripts are single-threaded here; this only affects codegen.
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let protos =
        ["common.proto", "election.proto", "lock.proto"].map(|p| root.join("zkgate/v1").join(p));
    // The messages and the client stubs, with tonic's default codec (the clients' buffers are
    // not what a gateway of many streams pays for).
    tonic_prost_build::configure()
        .build_server(false)
        .file_descriptor_set_path(out_dir.join("zkgate_descriptor.bin"))
        .compile_protos(&protos, std::slice::from_ref(&root))?;
    // The servers only, over the messages above, with small per-call buffers: see src/codec.rs;
    // `Observe` sends its state encoded once for every observer (src/encoded.rs).
    let server_dir = out_dir.join("server");
    std::fs::create_dir_all(&server_dir)?;
    tonic_prost_build::configure()
        .extern_path(
            ".zkgate.v1.ObserveResponse",
            "crate::EncodedObserveResponse",
        )
        .extern_path(".zkgate.v1", "crate")
        .build_client(false)
        .codec_path("crate::codec::LeanCodec")
        .out_dir(&server_dir)
        .compile_protos(&protos, &[root])?;
    for p in protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    Ok(())
}
