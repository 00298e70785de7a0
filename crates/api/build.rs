//! Embeds the inbox page's build (`ui/`, committed; built from crates/web by
//! `make ui`) so a `cargo build` needs no Node: writes `ui_files.rs`, a
//! slice of `(path, bytes)` with one `include_bytes!` per file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs, io};

fn main() -> io::Result<()> {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join("ui");
    println!("cargo::rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    if root.is_dir() {
        collect(&root, &root, &mut files)?;
    }
    files.sort();
    let mut source = String::from("&[\n");
    for (relative, absolute) in &files {
        println!("cargo::rerun-if-changed={}", absolute.display());
        writeln!(
            source,
            "    ({relative:?}, include_bytes!({:?})),",
            absolute.display().to_string()
        )
        .expect("writing to a String");
    }
    source.push(']');
    let out = PathBuf::from(env::var("OUT_DIR").expect("set by cargo")).join("ui_files.rs");
    fs::write(out, source)
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(root, &path, files)?;
        } else {
            let relative = path
                .strip_prefix(root)
                .expect("under the root")
                .components()
                .map(|part| part.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            files.push((relative, path));
        }
    }
    Ok(())
}
