//! Nothing of the header is left out: every symbol of tests/abi/symbols.txt is declared in
//! libaccel-sys with the header's number of parameters, and called by this crate; every
//! constant of the header has its value in libaccel-sys.

mod common;

use std::collections::BTreeMap;
use std::fs;

use common::repo_root;

/// libaccel-sys's source: its hand-written lib.rs and the declarations generated from accel.h.
fn sys_source(root: &std::path::Path) -> String {
    ["lib.rs", "generated.rs"]
        .iter()
        .map(|f| fs::read_to_string(root.join("bindings/rust/libaccel-sys/src").join(f)).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

fn symbols() -> Vec<String> {
    let text = fs::read_to_string(repo_root().join("tests/abi/symbols.txt")).unwrap();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// Number of parameters of each function in C or Rust source, from `name(` to its `)`.
fn arities(source: &str, prefix: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (at, _) in source.match_indices(prefix) {
        let rest = &source[at + prefix.len() - "accel_".len()..];
        let Some(open) = rest.find('(') else { continue };
        let name = &rest[..open];
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let close = rest[open..].find(')').unwrap() + open;
        let params = rest[open + 1..close].trim();
        let n = if params.is_empty() || params == "void" {
            0
        } else {
            params.trim_end_matches(',').split(',').count()
        };
        out.insert(name.to_string(), n);
    }
    out
}

#[test]
fn every_symbol_is_declared_with_the_header_arity_and_used() {
    let root = repo_root();
    let header = fs::read_to_string(root.join("include/accel/accel.h")).unwrap();
    let sys = sys_source(&root);
    let mut safe = String::new();
    for entry in fs::read_dir(root.join("bindings/rust/libaccel/src")).unwrap() {
        safe.push_str(&fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    // Prototypes: "ACCEL_API <type> accel_x(" in C, "pub fn accel_x(" in Rust. The C return type
    // may be a pointer ("const char* accel_version"), so search for the name after ACCEL_API.
    // Only the prototypes: the documentation also writes calls ("accel_dataloader_set_epoch(epoch)"
    // in the Trainer's), which must not stand for them.
    let prototypes: String = header
        .split(';')
        .filter_map(|chunk| chunk.rfind("ACCEL_API").map(|at| &chunk[at..]))
        .collect::<Vec<_>>()
        .join(";\n");
    let c_arity = arities(&prototypes.replace('*', " "), " accel_");
    let rust_arity = arities(&sys, "pub fn accel_");
    let symbols = symbols();
    assert!(symbols.len() > 100);
    // The functions bindings/left_out.txt says this crate does not use, each with its reason.
    let left_out: Vec<String> = fs::read_to_string(root.join("bindings/left_out.txt"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            (fields.next() == Some("rust")).then(|| fields.next().map(str::to_string))?
        })
        .collect();
    let mut problems = Vec::new();
    for s in &symbols {
        match (c_arity.get(s), rust_arity.get(s)) {
            (_, None) => problems.push(format!("{s} is not declared in libaccel-sys")),
            (Some(c), Some(r)) if c != r => problems.push(format!(
                "{s}: {c} parameters in accel.h, {r} in libaccel-sys"
            )),
            (None, _) => problems.push(format!("{s} has no prototype in accel.h")),
            _ => {}
        }
        // Called, or handed to owned_handle! as the destructor ("sys::accel_x_free").
        let used = safe.match_indices(&format!("sys::{s}")).any(|(at, m)| {
            let next = safe[at + m.len()..].chars().next().unwrap_or(' ');
            !(next.is_ascii_alphanumeric() || next == '_')
        });
        if !used && !left_out.contains(s) {
            problems.push(format!("{s} is not called by the libaccel crate"));
        }
    }
    for name in rust_arity.keys() {
        if !symbols.contains(name) {
            problems.push(format!(
                "libaccel-sys declares {name}, which the library does not export"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_constant_has_the_header_value() {
    let root = repo_root();
    let header = fs::read_to_string(root.join("include/accel/accel.h")).unwrap();
    let sys = sys_source(&root);
    // Header: enum members "  ACCEL_X = 3," and "#define ACCEL_MAX_DIMS 16".
    let mut c_values = BTreeMap::new();
    for line in header.lines() {
        let line = line.trim();
        if let Some((name, value)) = line.split_once(" = ") {
            if name.starts_with("ACCEL_") && !name.contains(' ') {
                let value = value
                    .trim_end_matches(',')
                    .split_whitespace()
                    .next()
                    .unwrap();
                c_values.insert(
                    name.to_string(),
                    value.trim_end_matches(',').parse::<i64>().unwrap(),
                );
            }
        } else if let Some(rest) = line.strip_prefix("#define ACCEL_") {
            let mut words = rest.split_whitespace();
            if let (Some(name), Some(value)) = (words.next(), words.next()) {
                if let Ok(v) = value.parse::<i64>() {
                    c_values.insert(format!("ACCEL_{name}"), v);
                }
            }
        }
    }
    assert!(c_values.len() > 30, "{c_values:?}");
    let mut problems = Vec::new();
    for (name, value) in &c_values {
        let decl = sys
            .lines()
            .find(|l| l.starts_with(&format!("pub const {name}:")))
            .map(|l| {
                l.rsplit('=')
                    .next()
                    .unwrap()
                    .trim()
                    .trim_end_matches(';')
                    .to_string()
            });
        match decl {
            None => problems.push(format!("{name} is missing from libaccel-sys")),
            Some(v) if v.parse::<i64>().ok() != Some(*value) => {
                problems.push(format!("{name} is {value} in accel.h, {v} in libaccel-sys"))
            }
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
