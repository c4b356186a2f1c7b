//! Compile the CSI spec's protobuf definitions (proto/csi.proto, CSI v1.12) into Rust: the
//! server side the driver serves and the client side its tests call.

fn main() {
    println!("cargo:rerun-if-changed=proto/csi.proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&["proto/csi.proto"], &["proto"])
        .expect("compile proto/csi.proto (protoc and libprotobuf-dev's well-known types)");
}
