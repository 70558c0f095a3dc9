//! Generates the gRPC servers from `proto/` (the messages and client stubs are
//! `zkgate-client`'s) and a file descriptor set for server reflection. `protoc` comes from the `protoc-bin-vendored` crate so that a fresh
//! machine needs no system package to build; set `PROTOC` to use another one.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_none() {
        // SAFETY of intent: build scripts are single-threaded here; this only affects codegen.
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let protos = [
        "proto/zkgate/v1/common.proto",
        "proto/zkgate/v1/election.proto",
        "proto/zkgate/v1/lock.proto",
    ];
    tonic_prost_build::configure()
        // One set of message types in the workspace: the client crate's. The gateway generates
        // only its servers, over those messages, so tests, the CLI and the benchmark hand the
        // same types to the client crate and to the gateway.
        .extern_path(".zkgate.v1", "::zkgate_client::pb")
        .build_client(false)
        // Small per-call buffers: see src/codec.rs.
        .codec_path("crate::codec::LeanCodec")
        .file_descriptor_set_path(out_dir.join("zkgate_descriptor.bin"))
        .compile_protos(&protos, &["proto"])?;
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    Ok(())
}
