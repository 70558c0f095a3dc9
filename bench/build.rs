//! Generates gRPC client stubs for the parts of etcd v3.4's API the benchmark uses, from the
//! trimmed, wire-compatible copies in `proto/`. `protoc` comes from `protoc-bin-vendored`, as in
//! the zkgate crate's own build script; set `PROTOC` to use another one.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_none() {
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }
    let protos = [
        "proto/mvccpb/kv.proto",
        "proto/etcdserverpb/rpc.proto",
        "proto/v3electionpb/v3election.proto",
        "proto/v3lockpb/v3lock.proto",
    ];
    tonic_prost_build::configure()
        .build_server(false)
        .compile_protos(&protos, &["proto"])?;
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    Ok(())
}
