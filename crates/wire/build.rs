//! Compiles every `proto/<group>/<version>/api.proto` with protox (pure Rust, no system protoc)
//! and generates prost messages plus tonic servers and clients, one Rust module per proto package.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let mut files: Vec<PathBuf> = Vec::new();
    for group in std::fs::read_dir(&root)? {
        let group = group?.path();
        if !group.is_dir() {
            continue;
        }
        for version in std::fs::read_dir(&group)? {
            let file = version?.path().join("api.proto");
            if file.is_file() {
                files.push(file);
            }
        }
    }
    files.sort();
    println!("cargo:rerun-if-changed={}", root.display());
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }

    let fds = protox::compile(&files, [&root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    // Kept for the descriptor test and for anything that wants reflection.
    std::fs::write(out.join("descriptor.bin"), prost::Message::encode_to_vec(&fds))?;

    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Clients get their channel from the caller; no dependency on tonic's transport.
        .build_transport(false)
        // Ordered maps give deterministic responses and logs.
        .btree_map(".")
        .compile_fds(fds)?;
    Ok(())
}
