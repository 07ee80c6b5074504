//! Compiles the KMS v2 protos (plugin API and stored EncryptedObject). The server side
//! is generated too: the `testing` feature serves the plugin API.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/kms_v2.proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["proto/kms_v2.proto"], &["proto"])?;
    Ok(())
}
