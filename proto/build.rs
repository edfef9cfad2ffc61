fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Vendored protoc: no system install needed.
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto/seatfence.proto");
    tonic_prost_build::configure().compile_protos(&["proto/seatfence.proto"], &["proto"])?;
    Ok(())
}
